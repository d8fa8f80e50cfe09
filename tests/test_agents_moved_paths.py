"""The agents modules that moved or were renamed still import under their old names, with every former name.

Old dotted paths answer through :func:`searchenv.utils.moved.register_moves` (no shim files): the
same module object as the new path, with a ``DeprecationWarning``. Modules that became packages
under the same name (``agents.rollout``, ``agents.policies.hf``, ``agents.integrations.trl``)
re-export what they held.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

import agents

#: Each old module's public names before the move (read off the old files).
FORMER_NAMES: dict[str, tuple[str, ...]] = {
    "agents.reference": (
        "AGENT_NAMES", "Agent", "DIRECT_PROMPT", "EpisodeRecord", "EpisodeState", "FEW_SHOT_EXAMPLE", "LLMAgent",
        "LLM_AGENTS", "RAG_PROMPT", "StepRecord", "Turn", "chat_messages", "close_answer", "make_agent",
        "run_agent", "with_system_prompt",
    ),
    "agents.policies.scripted": (
        "ABSTAIN", "HeuristicAgent", "Hop", "Lookup", "OracleAgent", "RandomAgent", "answer_turn",
        "evidence_titles", "is_lookup", "open_turn", "oracle_hops",
    ),
    "agents.reader": (
        "ANSWER_TYPES", "AnswerType", "Candidate", "ExtractorWeights", "QuestionAnalysis", "RELATION_GROUPS",
        "analyse_question", "asks_for_number", "capitalized_spans", "closed_book_guess", "closed_book_guess_from",
        "estimate_hops", "extract_candidates", "question_options", "relation_keywords", "tokenize",
    ),
    "agents.searcher": (
        "MANIFEST", "PACKAGED", "SearcherNotFoundError", "copy_searcher", "export_searcher", "load_searcher",
        "low_rank_adapter", "merge_adapter", "read_manifest",
    ),
    "agents.chat": (
        "Render", "chat_renderer", "reply_ids", "reply_text", "template_renderer", "turn_end_text",
    ),
    "agents.evaluate": (
        "COLUMNS", "EvalResult", "compare", "evaluate", "format_cell", "load_split", "markdown_table",
        "rich_table", "run_stem", "summarize", "write_results",
    ),
    "agents.bench": (
        "BenchDataError", "BenchSet", "CARD_VERSION", "COMPARABILITY", "METRICS", "PUBLISHED", "SUITES", "Suite",
        "average_row", "card_markdown", "code_version", "compare_cards", "judge_set", "prepare_index", "read_card",
        "read_set", "run_bench", "set_metrics", "suite_files", "token_counter", "write_card",
    ),
    "agents.judges": (
        "ANSWER_SYSTEM", "ANSWER_TEMPLATE", "CHOICE_SYSTEM", "CHOICE_TEMPLATE", "ChoiceAnswerJudge", "Judgement",
        "NONE_LABEL", "PolicyAnswerJudge", "PolicyRelevanceJudge", "RELEVANCE_SYSTEM", "RELEVANCE_TEMPLATE",
        "parse_choice", "parse_relevance_score", "parse_verdict",
    ),
    "agents.episode_log": (
        "EpisodeLog", "LOG_VERSION",
    ),
    "agents.advantages": (
        "GroupAdvantages", "SCALINGS", "discounted_returns", "gae", "group_advantages",
    ),
    "agents.losses": (
        "AGGREGATIONS", "KL_ESTIMATORS", "PolicyLossStats", "aggregate", "clipped_policy_loss", "kl_estimate",
        "masked_mean", "masked_sum", "masked_var", "masked_whiten", "value_loss",
    ),
    "agents.plot": (
        "PANELS", "plot_runs",
    ),
    "agents.cli_eval": (
        "build_policy", "check_model_flags", "eval_command", "load_policy", "register",
    ),
    "agents.cli_train": (
        "plot_command", "register_plot", "register_train", "run_training",
    ),
    "agents.cli_bench": (
        "bench_command", "compare_cards_command", "register",
    ),
    "agents.cli_sb3": (
        "register_train", "sb3_ppo",
    ),
    "agents.policies.hf.gguf": (
        "DEFAULT_MODEL", "PACKAGED_MODELS", "convert_gguf", "load_model", "model_cache_dir", "packaged_gguf_path",
        "quiet_loading", "resolve_model_path",
    ),
}

#: Modules that became packages of the same name, and the names they held (with the private ones
#: the tests import).
KEPT_NAMES: dict[str, tuple[str, ...]] = {
    "agents.rollout": (
        "EpisodeRecord", "Example", "ProbeStart", "RolloutBatch", "RolloutEngine", "RolloutStats", "STOP_REASONS",
        "episode_seed", "rollout",
    ),
    "agents.policies.hf": (
        "DECODE_MODES", "DEFAULT_MODEL", "HFPolicy", "PACKAGED_MODELS", "_DecodeStep", "_first_stop",
        "_head_logits", "_row_generators", "_row_uniforms", "_stop_window", "convert_gguf", "load_model",
        "model_cache_dir", "packaged_gguf_path", "resolve_model_path",
    ),
    "agents.integrations.trl": (
        "LOGGED_METRICS", "SearchQAArenaToolEnv", "SearchQABrowseToolEnv", "SearchQARollout", "SearchQAToolEnv",
        "TRLColocatePolicy", "reward_functions", "searchenv_return", "tool_schemas", "tool_sft_dataset",
    ),
}


def test_every_moved_module_is_listed() -> None:
    assert set(agents.MOVED_MODULES) == set(FORMER_NAMES)


@pytest.mark.parametrize("old", sorted(FORMER_NAMES))
def test_the_old_path_imports_the_new_module_with_a_warning(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    new = agents.MOVED_MODULES[old]
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    missing = [name for name in FORMER_NAMES[old] if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("name", sorted(KEPT_NAMES))
def test_a_module_that_became_a_package_keeps_its_names(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        module = importlib.import_module(name)
    missing = [n for n in KEPT_NAMES[name] if not hasattr(module, n)]
    assert missing == []


def test_renamed_classes_keep_their_old_name_with_a_warning() -> None:
    import agents.baselines
    import agents.rollout
    from agents.baselines import EpisodeResult
    from agents.rollout import TokenEpisode

    with pytest.warns(DeprecationWarning, match="agents.baselines.EpisodeRecord is now agents.baselines.episode"):
        from agents.baselines import EpisodeRecord
    with pytest.warns(DeprecationWarning, match="agents.rollout.EpisodeRecord is now agents.rollout.records"):
        from agents.rollout import EpisodeRecord as RolloutRecord
    assert EpisodeRecord is EpisodeResult and RolloutRecord is TokenEpisode and EpisodeResult is not TokenEpisode
    assert "EpisodeRecord" not in agents.baselines.__all__ and "EpisodeRecord" not in agents.rollout.__all__
    from agents.trainers import episodes

    with pytest.warns(DeprecationWarning, match="episode_metrics is now agents.trainers.episodes.step_metrics"):
        old = episodes.episode_metrics
    assert old is episodes.step_metrics


def test_the_entry_point_target_is_there() -> None:
    from agents.cli import register

    assert callable(register)
