"""What makes a resumed evaluation the same run, and the checks on the episodes it reads back.

An evaluation with ``checkpoint_dir`` saves its finished episodes (:mod:`agents.evaluation.episode_log`)
under the settings that decide its results; a later run continues from them only when its own
settings are equal (:func:`run_settings`). Those settings fingerprint the data, not only its
names: the questions, their gold answers and evidence (:func:`qa_fingerprints`), the corpus behind
the index (:func:`index_fingerprint`), and for a served model the name it serves and its address
(:func:`served_model_settings`).

A saved episode is not trusted as written (:func:`check_saved`): what the saved data decides is
computed again (the answer from the last assistant turn of the saved messages, read by the run's
protocol as the environment reads it (:func:`answer_of_turns`); EM, F1 and gold-in-prediction from
that answer and the current gold; evidence recall from the saved retrieved ids; the counts from
the saved steps), each step's reward against its reward terms, the return against the saved
per-step rewards, and then the saved turns are played again in an environment with the run's
settings (:func:`replay`), so every reward term (the outcome from the answer and the gold, format,
cost, relevance, shaping) and the return are the environment's recomputation; a saved value that
disagrees is refused with its file, line and field.
These checks catch edited numbers, however consistent with each other, not a whole episode
forged with other turns: the file is not signed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agents.baselines import EpisodeResult
from searchenv.env import SearchQAEnv
from searchenv.metrics import exact_match, f1_score, gold_in_prediction
from searchenv.protocols import ActionProtocol, Answer, tool_turn_text
from searchenv.retrievers.base import Retriever, RetrieverError, search_or_error
from searchenv.tasks import QAExample

#: Relative tolerance of a step's reward against the sum of its terms (as the environment checks).
TERMS_TOLERANCE = 1e-6
#: Files of a local model whose size and time decide its fingerprint (:func:`model_files_fingerprint`).
MODEL_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
MODEL_CONFIGS = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode()).hexdigest()[:16]


def qa_fingerprints(examples: Sequence[QAExample]) -> dict[str, str]:
    """``questions`` (ids and questions) and ``gold`` (gold answers and evidence ids) of a run's questions."""
    return {"questions": _digest([[e.id, e.question] for e in examples]),
            "gold": _digest([[e.id, list(e.answers), list(e.evidence_ids)] for e in examples])}


def index_fingerprint(retriever: Retriever, corpus: str | os.PathLike[str] | None) -> str | None:
    """The fingerprint of the documents the retriever searches.

    The index's corpus fingerprint when it records one (built indexes do); else the SHA-256 of the
    ``corpus`` file when one is given; else None (e.g. a retrieval server, named by its address).
    """
    held = getattr(retriever, "fingerprint", None)
    if isinstance(held, str) and held.strip("+"):
        return held
    if corpus is not None and Path(corpus).is_file():
        from searchenv.retrievers.index.metadata import file_sha256

        return str(file_sha256(corpus))[:32]
    return None


def public_url(url: str) -> str:
    """``url`` without its user name, password, query and fragment (nothing secret is saved)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def served_model_settings(agent: Any) -> dict[str, str]:
    """For an agent on a served model: the name the server serves (``served_model_name``) and its address.

    Asking a policy that was given no model name makes it ask the server (``GET /v1/models``);
    empty for an agent without a served model.
    """
    policy = getattr(agent, "policy", None)
    base = getattr(policy, "base_url", None)
    if not isinstance(base, str):
        return {}
    return {"served_model_name": str(policy.model), "model_server": public_url(base)}  # type: ignore[union-attr]


def model_files_fingerprint(model: str | None) -> str | None:
    """A fingerprint of a local model file or folder: names, sizes and modification times of its weights.

    Weights (:data:`MODEL_SUFFIXES`) and model configs (:data:`MODEL_CONFIGS`) anywhere under a
    folder count; None when ``model`` is not a local path (a packaged name, or no model).
    """
    if model is None:
        return None
    path = Path(model)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*")
                       if p.is_file() and (p.suffix in MODEL_SUFFIXES or p.name in MODEL_CONFIGS))
    else:
        return None
    stats = [[str(p.relative_to(path)) if p != path else p.name, p.stat().st_size, p.stat().st_mtime_ns]
             for p in files]
    return _digest(stats)


def run_settings(
    *,
    agent: Any,
    retriever: Retriever,
    retriever_label: str,
    task_label: str,
    split: str,
    examples: Sequence[QAExample],
    corpus: str | os.PathLike[str] | None,
    protocol: str,
    top_k: int,
    max_turns: int,
    reward: str | Mapping[str, float],
    batch_size: int,
    seed: int,
    max_new_tokens: int,
    env_kwargs: Mapping[str, Any] | None,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Everything that decides an evaluation's results, as JSON values (the saved run's settings line).

    Args:
        agent: The agent (its name, turn budget and served model count).
        retriever: The resolved retriever (its corpus fingerprint counts).
        retriever_label: The retriever as named.
        task_label: The task as named.
        split: The split.
        examples: The run's questions (ids, questions, gold answers and evidence count).
        corpus: The corpus file given, if any.
        protocol: The protocol's name.
        top_k: Documents per query.
        max_turns: Turn budget.
        reward: Reward preset or weights.
        batch_size: Episodes in flight (decides seeds of sampled turns).
        seed: Run seed.
        max_new_tokens: Generation cap per turn.
        env_kwargs: Further environment arguments.
        extra: More settings from the caller (the model flags of the command).

    Returns:
        The settings.
    """
    return {"agent": agent.name, "agent_max_turns": getattr(agent, "max_turns", None),
            "retriever": retriever_label, "index": index_fingerprint(retriever, corpus),
            "task": task_label, "split": split, "n": len(examples), **qa_fingerprints(examples),
            "protocol": protocol, "top_k": top_k, "max_turns": max_turns,
            "reward": reward if isinstance(reward, str) else dict(reward), "batch_size": batch_size,
            "seed": seed, "max_new_tokens": max_new_tokens, "env_kwargs": dict(env_kwargs or {}),
            **served_model_settings(agent), **generation_settings(agent), **dict(extra or {})}


def generation_dtype_of(agent: Any) -> str:
    """The dtype an in-process agent's model generates with: its generation copy's, else its weights'."""
    policy = getattr(agent, "policy", None)
    copy = getattr(policy, "generation_dtype", None)
    if copy is not None:
        return str(copy).removeprefix("torch.")
    params = getattr(getattr(policy, "model", None), "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    return str(first.dtype).removeprefix("torch.") if first is not None else "unknown"


def generation_settings(agent: Any) -> dict[str, str]:
    """``generation_dtype`` where an in-process model generates from a copy of its weights, else nothing.

    Nothing for a model generating from its own weights keeps checkpoints written before the
    setting existed resumable by such runs.
    """
    copy = getattr(getattr(agent, "policy", None), "generation_dtype", None)
    return {} if copy is None else {"generation_dtype": generation_dtype_of(agent)}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


def _number(value: Any, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}, field '{field}': expected a finite number, got {value!r}")
    return float(value)


def answer_of_turns(messages: Sequence[Any], protocol: ActionProtocol, where: str) -> str | None:
    """The answer the saved messages hold: their last assistant turn, read by ``protocol`` as the environment reads it.

    Under a tag protocol the turn is the message's content; under a tool-call protocol it is the
    content with the message's ``tool_calls`` laid out as the served model's calls reach the
    environment (:func:`searchenv.protocols.tool_turn_text`).

    Args:
        messages: The episode's saved chat messages.
        protocol: The run's protocol.
        where: ``file, line N`` for messages.

    Returns:
        The answer's text, or None when that turn is not an answer.

    Raises:
        ValueError: Naming the file, line and field, if there is no assistant turn or it is not text.
    """
    last = next((i for i in range(len(messages) - 1, -1, -1)
                 if isinstance(messages[i], Mapping) and messages[i].get("role") == "assistant"), None)
    if last is None:
        raise ValueError(f"{where}, field 'messages': a finished episode has at least one assistant turn")
    content, calls = messages[last].get("content"), messages[last].get("tool_calls")
    if not isinstance(content, str):
        raise ValueError(f"{where}, field 'messages[{last}].content': expected a string, got {content!r:.60}")
    if calls is not None and not isinstance(calls, list):
        raise ValueError(f"{where}, field 'messages[{last}].tool_calls': expected a list, got {calls!r:.60}")
    turn = tool_turn_text(content, calls, ids=True) if protocol.native_tools and calls else content
    action = protocol.parse(turn)
    return action.text if isinstance(action, Answer) else None


def assistant_turns(messages: Sequence[Any], protocol: ActionProtocol, where: str) -> list[str]:
    """Every assistant turn of the saved messages as the environment was handed it (:func:`answer_of_turns`).

    Raises:
        ValueError: Naming the file, line and field of a turn that is not text.
    """
    turns = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        content, calls = message.get("content"), message.get("tool_calls")
        if not isinstance(content, str):
            raise ValueError(f"{where}, field 'messages[{i}].content': expected a string, got {content!r:.60}")
        if calls is not None and not isinstance(calls, list):
            raise ValueError(f"{where}, field 'messages[{i}].tool_calls': expected a list, got {calls!r:.60}")
        turns.append(tool_turn_text(content, calls, ids=True) if protocol.native_tools and calls else content)
    return turns


def replay(episode: EpisodeResult, env: SearchQAEnv, where: str) -> float:
    """Play the saved turns again in ``env`` and check every step's reward and reward terms against the saved ones.

    Each saved assistant turn is handed to the environment as the run handed it; a search is
    searched again (the same index and query give the same ranking), and a step saved as a
    retriever failure fails again, so every term (the outcome from the answer and the gold, format,
    cost, relevance to the gold evidence, shaping) is the environment's own recomputation.

    Args:
        episode: The saved episode (its steps already checked for shape).
        env: An environment with the run's settings (retriever, protocol, turn budget, reward),
            over the run's questions.
        where: ``file, line N`` for messages.

    Returns:
        The return the replayed steps give.

    Raises:
        ValueError: Naming the file, line and field of the first step whose saved reward, reward
            terms or kind disagree with the replay, or saved turns that do not make the saved steps.
        RetrieverError: If the retriever fails on a search it answered when the episode was saved.
    """
    turns = assistant_turns(episode.messages, env.protocol, where)
    steps = episode.steps
    if len(turns) != len(steps):
        raise ValueError(f"{where}, field 'steps': {len(steps)} saved steps, but the saved messages hold "
                         f"{len(turns)} assistant turns")
    env.reset(options={"example_id": episode.example_id})
    total = 0.0
    for i, (turn, saved) in enumerate(zip(turns, steps, strict=True)):
        try:
            request = env.prepare_step(turn)
        except RuntimeError:  # the episode ended before the saved steps did
            raise ValueError(f"{where}, field 'steps[{i}]': the saved turns end the episode after step {i}, but "
                             f"{len(steps)} steps are saved") from None
        hits: Any = None
        if request.queries:
            hits = (RetrieverError("saved as a retriever failure") if saved.get("infra_error")
                    else search_or_error(env.retriever, request.queries, env.top_k))
        if isinstance(hits, Exception) and not saved.get("infra_error"):
            raise RetrieverError(f"{where}, field 'steps[{i}]': cannot play the saved turns again to check their "
                                 f"rewards: the retriever failed ({type(hits).__name__}: {str(hits)[:300]}); "
                                 "resume when it answers")
        _, reward, _, _, info = env.finish_step(request, hits)
        if info["action_type"] != saved.get("action_type"):
            raise ValueError(f"{where}, field 'steps[{i}].action_type': saved {saved.get('action_type')!r}, but "
                             f"replaying the saved turn gives {info['action_type']!r}")
        terms, saved_terms = dict(info["reward_terms"]), saved.get("reward_terms") or {}
        for name in [*terms, *(n for n in saved_terms if n not in terms)]:
            if name not in saved_terms or name not in terms or not _same(float(saved_terms[name]), float(terms[name])):
                raise ValueError(f"{where}, field 'steps[{i}].reward_terms.{name}': saved "
                                 f"{saved_terms.get(name)!r}, but replaying the saved turns gives "
                                 f"{terms.get(name)!r}")
        if not _same(float(saved["reward"]), float(reward)):
            raise ValueError(f"{where}, field 'steps[{i}].reward': saved {saved['reward']!r}, but replaying the "
                             f"saved turns gives {float(reward)!r}")
        total += float(reward)
    return total


def recompute(episode: EpisodeResult, example: QAExample, where: str,
              protocol: ActionProtocol | None = None, env: SearchQAEnv | None = None) -> dict[str, Any]:
    """The metrics of a saved episode computed again from its answer, its steps and the current gold.

    Args:
        episode: The saved (finished) episode.
        example: The question at its position, as the run now reads it.
        where: ``file, line N`` for messages.
        protocol: The run's protocol: the saved answer must be the one its last assistant turn
            gives (:func:`answer_of_turns`); None where the episode has no protocol (a pipeline).
        env: An environment with the run's settings: the saved turns are played again in it and every
            step's reward and reward terms must be what it gives (:func:`replay`); None to check the
            rewards only against their terms and the return (a pipeline).

    Returns:
        ``metrics`` with every recomputable value replaced by its recomputation.

    Raises:
        ValueError: Naming the file, line and field, if the episode is not of this question or a
            saved value disagrees with its recomputation.
    """
    for field, saved, now in (("example_id", episode.example_id, example.id),
                              ("question", episode.question, example.question),
                              ("gold", episode.gold, list(example.answers))):
        if saved != now:
            raise ValueError(f"{where}, field '{field}': saved {saved!r}, but the question at this position has "
                             f"{now!r}")
    steps, m, answer, golds = episode.steps, episode.metrics, episode.answer, list(example.answers)
    if not steps:
        raise ValueError(f"{where}, field 'steps': a finished episode has at least one step")
    types = [s.get("action_type") for s in steps]
    total = 0.0
    for i, s in enumerate(steps):
        reward = _number(s.get("reward"), where, f"steps[{i}].reward")
        terms = s.get("reward_terms")
        if not isinstance(terms, Mapping):
            raise ValueError(f"{where}, field 'steps[{i}].reward_terms': expected an object, got {terms!r}")
        summed = sum(_number(v, where, f"steps[{i}].reward_terms.{k}") for k, v in terms.items())
        if abs(summed - reward) > TERMS_TOLERANCE * max(1.0, abs(reward)):
            raise ValueError(f"{where}, field 'steps[{i}].reward': saved {reward!r}, but its reward_terms sum to "
                             f"{summed!r}")
        total += reward
    if answer is not None and types[-1] != "answer":
        raise ValueError(f"{where}, field 'answer': saved {answer!r}, but the last step is a {types[-1]!r}, not an "
                         "answer")
    retrieved = list(dict.fromkeys(d for s in steps for d in (s.get("doc_ids") or ())))
    evidence = set(example.evidence_ids)
    scored = answer is not None
    by_answer = "the saved answer {a} and the gold {g} give"
    expected: dict[str, tuple[Any, str]] = {
        "em": (exact_match(answer, golds) if answer is not None else 0.0, by_answer),
        "f1": (f1_score(answer, golds) if answer is not None else 0.0, by_answer),
        "contains": (gold_in_prediction(answer, golds) if answer is not None else 0.0, by_answer),
        "evidence_recall": (len(evidence & set(retrieved)) / len(evidence) if evidence else None,
                            "the saved steps' doc_ids and the evidence give"),
        "retrieved_doc_ids": (retrieved, "the saved steps' doc_ids give"),
        "answered": (scored, "the saved answer gives"),
        "return": (total, "the saved steps' rewards sum to"),
        "turns": (len(steps), "the saved steps give"),
        "searches": (types.count("search"), "the saved steps give"),
        "queries": (sum(len(s.get("queries") or ()) for s in steps if s.get("action_type") == "search"),
                    "the saved steps give"),
        "invalid_turns": (types.count("invalid"), "the saved steps give"),
        "opens": (types.count("open"), "the saved steps give"),
        "infra_errors": (sum(bool(s.get("infra_error")) for s in steps), "the saved steps give"),
        "generated_tokens": (sum(int(s.get("generated_tokens") or 0) for s in steps), "the saved steps give"),
    }
    out = dict(m)
    for key, (value, how) in expected.items():
        if key not in m:
            raise ValueError(f"{where}, field 'metrics.{key}': missing")
        if not _same(m[key], value):
            said = how.format(a=repr(answer), g=golds)
            raise ValueError(f"{where}, field 'metrics.{key}': saved {m[key]!r}, but {said} {value!r}")
        out[key] = value
    if protocol is not None:  # the scores agree with the saved answer: is it the one the model gave?
        given = answer_of_turns(episode.messages, protocol, where)
        if given != answer:
            raise ValueError(f"{where}, field 'answer': saved {answer!r}, but the last assistant turn of the saved "
                             f"messages gives {given!r} (read by the {protocol.name or type(protocol).__name__} "
                             "protocol)")
    if env is not None:  # every reward term and the return, as the environment computes them from the turns
        out["return"] = replay(episode, env, where)
    return out


def check_saved(saved: Mapping[int, EpisodeResult], examples: Sequence[QAExample], path: str | os.PathLike[str],
                lines: Mapping[int, int], protocol: ActionProtocol | None = None,
                env: SearchQAEnv | None = None) -> dict[int, EpisodeResult]:
    """The saved episodes of a run with their scores computed again (see the module docstring).

    Args:
        saved: Episodes by position, as the episode log read them.
        examples: The run's questions, by position.
        path: The episode log (for messages).
        lines: The line of each position in the file (for messages).
        protocol: The run's protocol, which reads each saved answer again from the saved turns
            (None: no protocol, as for a pipeline; the saved answer is then taken as written).
        env: An environment with the run's settings, in which each episode's saved turns are played
            again (:func:`replay`); None for no replay (a pipeline).

    Returns:
        The episodes, each with its metrics recomputed against the current gold.

    Raises:
        ValueError: Naming the file, line and field of the first episode that is not of this run
            or whose saved numbers disagree with their recomputation.
    """
    out: dict[int, EpisodeResult] = {}
    for position, episode in sorted(saved.items()):
        where = f"{path}, line {lines.get(position, '?')}"
        if position >= len(examples):
            raise ValueError(f"{where}, field 'position': {position} is not a question of this run (it has "
                             f"{len(examples)})")
        if episode.error is not None:
            raise ValueError(f"{where}, field 'error': a failed episode is never saved, got {episode.error!r}")
        metrics = recompute(episode, examples[position], where, protocol, env)
        out[position] = EpisodeResult(episode.example_id, episode.question, list(examples[position].answers),
                                      episode.answer, episode.messages, episode.steps, metrics)
    return out
