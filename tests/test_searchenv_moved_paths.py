"""Old import paths of the house redesign (issue 40) keep working for one release.

A module whose dotted name went away answers its old name with the new module (and a
``DeprecationWarning``); a module that became a package (``searchenv.protocols``,
``searchenv.rewards``) or kept its name re-exports every public name it had. Each list below is
the module's public names before the move.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings

import pytest

import searchenv

FORMER_NAMES: dict[str, list[str]] = {
    "searchenv.protocols": [
        "ALL_TAGS", "Action", "Answer", "ArenaProtocol", "BrowseProtocol", "INVALID_CODES", "Invalid",
        "MultiQueryProtocol", "Open", "Protocol", "Search", "SearchR1Protocol", "ToolCall", "ToolsBrowseProtocol",
        "ToolsProtocol", "get_protocol", "invalid_share", "protocol_names", "register_protocol", "sanitize",
        "tool_turn_text",
    ],
    "searchenv.rewards": [
        "ArenaReward", "OUTCOME_METRICS", "OutcomeMetric", "PRESETS", "R3RAGReward", "ReSearchReward", "Reward",
        "RewardResult", "SearchR1FormatReward", "StepContext", "TERMS", "WeightedReward", "answer_admissible",
        "arena_turn_valid", "citation_f1", "cost_score", "custom", "evidence_recall", "format_score", "get_reward",
        "outcome_score", "preset", "preset_names", "relevance_score", "score_step", "search_r1_turn_valid",
        "shaping_score",
    ],
    "searchenv.verifiers": [
        "EMBEDDING_INTERCEPT", "EMBEDDING_SLOPE", "EmbeddingVerifier", "JudgeVerifier", "RelevanceJudge",
        "Verifier", "answer_in_doc", "doc_text", "get_verifier", "gold_evidence", "register_verifier",
        "verifier_names",
    ],
    "searchenv.tasks.base": [
        "QAExample", "SPLITS", "SubQuestion", "Task", "TaskSpec", "blank_answer", "cache_dir", "checked_example",
        "example_from_flashrag", "load_task", "looks_like_file", "qa_lines", "read_qa_jsonl", "register_task",
        "split_examples", "task_specs", "write_qa_jsonl",
    ],
    "searchenv.tasks.formats": [
        "CONTEXT_FORMATS", "Dataset", "EVIDENCE_FIELDS", "FINGERPRINT_KEY", "FORMATS", "ID_FIELDS", "Parser",
        "check_outputs", "convert", "guess_format", "iter_records", "numbered_id", "passage_prefix", "read_2wiki",
        "read_browsecomp_plus", "read_flashrag", "read_format", "read_hotpotqa", "read_musique", "read_qa",
        "read_trec_qrels",
    ],
    "searchenv.tasks.world.render": [
        "city_doc", "city_people", "country_cities", "country_doc", "document", "is_female", "iter_documents",
        "mention_doc", "org_doc", "org_staff", "person_bio", "person_career", "person_docs", "person_personal",
        "person_works", "ref", "uni_alumni", "uni_doc", "work_doc",
    ],
    "searchenv.docstore": [
        "DOCS_FILE", "DocStore", "OFFSETS_FILE",
    ],
    "searchenv.retrievers": [
        "Hit", "IndexIntegrityError", "META_FILE", "Retriever", "RetrieverError", "StaleIndexError",
        "_index_class", "another_corpus", "build_index", "cached_index_folder", "check_fresh", "check_k",
        "damaged", "file_sha256", "index_kinds", "index_lock", "open_index", "read_meta", "register_index_kind",
        "retriever_for_corpus",
    ],
    "searchenv.retrievers.index_meta": [
        "FORMAT_VERSION", "IndexIntegrityError", "META_FILE", "StaleIndexError", "T", "another_corpus",
        "check_count", "check_files", "check_fresh", "damaged", "data_folder", "file_sha256", "index_lock",
        "load_index", "meta_digest", "publish_index", "read_meta", "rebuild_command",
    ],
    "searchenv.retrievers.dense": [
        "BLAS_DATABASE_BLOCK", "BLAS_THRESHOLD", "DenseRetriever", "FACTORY_PREFIX", "INDEX_FILE", "INDEX_PRESETS",
        "INDEX_TYPES", "KEEP_VECTORS", "VECTORS_FILE", "configure_faiss_blas", "default_nlist", "index_plan",
    ],
    "searchenv.retrievers.server": [
        "ConnectionLimits", "DEFAULT_ALLOWED_HOSTS", "MSGPACK_TYPES", "SearchR1Request", "ServerLimits",
        "SingleQueryRequest", "create_app", "log", "search_r1_result", "uvicorn_config",
    ],
    "searchenv.retrievers.remote": [
        "DEFAULT_MAX_RESPONSE_BYTES", "DIALECTS", "RemoteRetriever", "TOKEN_ENV", "check_token", "is_server_url",
        "parse_query", "parse_search_r1", "remote_from_url",
    ],
    "searchenv.serving.client": [
        "DEFAULT_MAX_RESPONSE_BYTES", "DIALECTS", "RemoteRetriever", "TOKEN_ENV", "check_token", "is_server_url",
        "parse_query", "parse_search_r1", "remote_from_url",
    ],
    "searchenv.protocols.actions": [
        "Action", "Answer", "INVALID_CODES", "Invalid", "Open", "Search", "ToolCall",
    ],
    "searchenv.retrievers.quality": [
        "MAX_IDS_CHECKED", "RetrievalQuality", "evaluate_retrieval", "evidence_warning", "index_doc_ids",
    ],
    "searchenv.envpool": [
        "EnvPool",
    ],
    "searchenv.httpclient": [
        "DEFAULT_MAX_RESPONSE_BYTES", "JSONClient", "MAX_RETRY_AFTER", "RETRYABLE_STATUS", "check_call_options",
        "check_token", "error_text", "read_capped",
    ],
    "searchenv.jsonsafe": [
        "DEFAULT_MAX_DEPTH", "JSONInputError", "iter_jsonl", "loads",
    ],
    "searchenv.files": [
        "publishable", "umask",
    ],
    "searchenv.env": [
        "DEFAULT_MAX_DOC_CHARS", "DEFAULT_TASK", "SearchQAEnv", "StepRequest", "episode_metrics",
        "resolve_retriever", "search_or_error",
    ],
}


#: Modules that need an optional extra (``serve``).
NEEDS = {"searchenv.retrievers.server": ("fastapi", "uvicorn")}


@pytest.mark.parametrize("old", sorted(FORMER_NAMES))
def test_old_path_imports_and_exposes_its_former_names(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for extra in NEEDS.get(old, ()):
        pytest.importorskip(extra)
    new = searchenv.MOVED_MODULES.get(old)
    if new is not None:
        monkeypatch.delitem(sys.modules, old, raising=False)
        with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
            module = importlib.import_module(old)
        assert module is importlib.import_module(new)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            module = importlib.import_module(old)
    missing = [name for name in FORMER_NAMES[old] if not hasattr(module, name)]
    assert missing == []


def test_every_registered_move_is_checked_and_lands_on_a_module() -> None:
    for old, new in searchenv.MOVED_MODULES.items():
        assert old in FORMER_NAMES, old
        if all(importlib.util.find_spec(extra) for extra in NEEDS.get(old, ())):
            importlib.import_module(new)


def test_protocol_is_the_old_name_of_action_protocol_with_a_warning() -> None:
    import searchenv.protocols as protocols
    from searchenv.protocols import ActionProtocol, SearchR1Protocol

    with pytest.warns(DeprecationWarning, match="searchenv.protocols.Protocol is now"):
        from searchenv.protocols import Protocol
    assert Protocol is ActionProtocol and issubclass(SearchR1Protocol, ActionProtocol)
    with pytest.warns(DeprecationWarning, match="searchenv.Protocol is now"):
        assert searchenv.Protocol is ActionProtocol
    assert "Protocol" not in protocols.__all__ and "Protocol" not in searchenv.__all__
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        protocols.Nope  # noqa: B018


def test_renamed_helpers_keep_their_old_homes() -> None:
    from searchenv import env, make, metrics

    assert env.episode_metrics is metrics.episode_metrics
    assert env.resolve_retriever is make.resolve_retriever
    with pytest.warns(DeprecationWarning, match="searchenv.protocols.invalid_share is now searchenv.metrics"):
        from searchenv.protocols import invalid_share
    assert invalid_share is metrics.invalid_share


def test_env_pool_is_the_old_name_of_idle_envs_with_a_warning() -> None:
    from searchenv import idle_envs

    with pytest.warns(DeprecationWarning, match="searchenv.idle_envs.EnvPool is now searchenv.idle_envs.IdleEnvs"):
        assert idle_envs.EnvPool is idle_envs.IdleEnvs


def test_info_warns_and_gives_what_client_view_and_step_info_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    from searchenv import client_view, step_info

    monkeypatch.delitem(sys.modules, "searchenv.info", raising=False)
    with pytest.warns(DeprecationWarning, match="searchenv.info is now searchenv.client_view"):
        info = importlib.import_module("searchenv.info")
    moved = {"ANSWER_DERIVED_KEYS": client_view, "MODES": client_view, "REWARD_KEYS": client_view,
             "check_mode": client_view, "client_info": client_view, "client_reward": client_view,
             "SUMMARY_KEY": step_info, "StepInfo": step_info}
    assert sorted(info.__all__) == sorted(moved)
    assert [name for name, home in moved.items() if getattr(info, name) is not getattr(home, name)] == []
