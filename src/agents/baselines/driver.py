"""The batched driver: any :class:`~agents.baselines.episode.Agent` through ordinary ``SearchQAEnv`` instances.

Each round the agent gives the turns of every active episode in one call (one batched
``policy.generate`` for the LLM agents); the turns are parsed with ``env.prepare_step``, every
query of every episode goes to one ``retriever.search_batch`` call
(:func:`searchenv.vector.search_round`) and the steps are completed with ``env.finish_step``.
Scores, rewards and transcripts therefore come from the environment itself, exactly as for a
trained policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agents.baselines.episode import Agent, EpisodeResult, EpisodeState, StepRecord, batch_positions, run_batches
from agents.rollout.seeds import agent_seed
from searchenv.env import SearchQAEnv
from searchenv.protocols import ActionProtocol, get_protocol
from searchenv.retrievers.base import Retriever
from searchenv.tasks import QAExample
from searchenv.vector import search_round


def run_agent(
    agent: Agent,
    examples: Sequence[QAExample],
    retriever: Retriever,
    *,
    protocol: str | ActionProtocol = "search-r1",
    top_k: int = 3,
    max_turns: int = 4,
    reward: str | Mapping[str, float] = "default",
    batch_size: int = 32,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    on_batch: Callable[[int], None] | None = None,
    positions: Sequence[int] | None = None,
    on_records: Callable[[list[tuple[int, EpisodeResult]]], None] | None = None,
) -> list[EpisodeResult]:
    """Run one episode per example through ``SearchQAEnv``, ``batch_size`` episodes at a time.

    An episode whose model request fails after its retries (an agent returns a :class:`Turn`
    with ``error``) ends as a failed :class:`EpisodeResult` (``error`` set, not scored); the
    other episodes go on.

    Args:
        agent: The agent.
        examples: The questions, in order; episode ``i`` gets per-episode seed from
            ``(seed, positions[i])``, so results do not depend on ``batch_size`` for scripted agents.
        retriever: Shared by all episodes; every round searches all queries in one call.
        protocol: Protocol name or instance (the agent may adapt it, e.g. its prompt).
        top_k: Documents per query.
        max_turns: Turn budget (capped by the agent's own ``max_turns``).
        reward: Reward preset name or term weights.
        batch_size: Episodes in flight at once.
        seed: Run seed.
        env_kwargs: Further ``SearchQAEnv`` keyword arguments.
        on_batch: Called with the number of episodes finished after each batch.
        positions: Each example's position in the whole run (default ``0, 1, ...``): a run that
            continues an interrupted one passes the positions of the examples it still has to
            run, so they get the seeds, and batches, they had.
        on_records: Called after each batch with its ``(position, record)`` pairs (to save
            finished episodes as they complete).

    Returns:
        One :class:`EpisodeResult` per example, in order.

    Raises:
        ValueError: For a non-positive ``batch_size``, an empty example list, or ``positions`` of
            another length.
    """
    places = batch_positions(examples, batch_size, positions)
    proto = agent.adapt_protocol(get_protocol(protocol) if isinstance(protocol, str) else protocol)
    turns_cap = max_turns if agent.max_turns is None else min(max_turns, agent.max_turns)
    kwargs = dict(env_kwargs or {})
    n_envs = min(batch_size, len(examples))
    envs = [
        SearchQAEnv(
            list(examples),
            retriever=retriever,
            protocol=proto,
            top_k=top_k,
            max_turns=turns_cap,
            reward=reward,
            **kwargs,
        )
        for _ in range(n_envs)
    ]
    return run_batches(
        examples,
        places,
        n_envs,
        lambda batch: _run_batch(agent, envs[: len(batch)], batch, retriever, top_k, seed),
        on_records=on_records,
        on_batch=on_batch,
    )


def _run_batch(
    agent: Agent,
    envs: Sequence[SearchQAEnv],
    batch: Sequence[tuple[int, QAExample]],
    retriever: Retriever,
    top_k: int,
    seed: int,
) -> list[EpisodeResult]:
    states: list[EpisodeState] = []
    step_logs: list[list[dict[str, Any]]] = []
    finals: list[dict[str, Any] | None] = [None] * len(batch)
    for env, (pos, ex) in zip(envs, batch, strict=True):
        env.reset(seed=agent_seed(seed, pos), options={"example_id": ex.id})
        states.append(EpisodeState(pos, ex, env.protocol, env.max_turns, agent_seed(seed, pos), env.messages()))
        step_logs.append([])
    errors: list[str | None] = [None] * len(batch)
    active = list(range(len(batch)))
    round_no = 0
    while active:
        round_seed = agent_seed(seed, batch[0][0] * 131 + round_no)
        turns = agent.act([states[i] for i in active], seed=round_seed)
        if len(turns) != len(active):
            raise RuntimeError(f"agent {agent.name!r} returned {len(turns)} turns for {len(active)} episodes")
        for i, t in zip(active, turns, strict=True):
            errors[i] = t.error
        turns = [t for t in turns if t.error is None]
        active = [i for i in active if errors[i] is None]  # a failed episode ends here, unscored
        requests = [envs[i].prepare_step(t.text) for i, t in zip(active, turns, strict=True)]
        found = search_round({i: (retriever, top_k, req.queries) for i, req in zip(active, requests, strict=True)})
        still: list[int] = []
        for i, turn, req in zip(active, turns, requests, strict=True):
            hits = found[i]
            _, reward, terminated, truncated, info = envs[i].finish_step(req, hits)
            shown = envs[i].shown_hits  # what the agent was shown: cut to max_doc_chars, refined
            states[i].steps.append(StepRecord(turn.text, info, shown))
            states[i].messages = envs[i].messages()
            step_logs[i].append(
                {
                    "turn": info["turn"],
                    "action_type": info["action_type"],
                    "invalid_reason": info["invalid_reason"],
                    "queries": info["queries"],
                    "doc_ids": info["doc_ids"],
                    "reward": float(reward),
                    "reward_terms": info["reward_terms"],
                    "generated_tokens": turn.generated_tokens,
                    "infra_error": info["infra_error"],
                    **{k: info[k] for k in ("opened", "cited_doc_ids") if k in info},
                }
            )
            if terminated or truncated:
                finals[i] = info
            else:
                still.append(i)
        active = still
        round_no += 1
    out = []
    for i, (_, ex) in enumerate(batch):
        final = finals[i]
        if errors[i] is not None:
            out.append(EpisodeResult(ex.id, ex.question, list(ex.answers), None, states[i].messages, step_logs[i], {},
                                     errors[i]))
            continue
        if final is None:  # pragma: no cover - every episode ends by answer or budget
            raise RuntimeError("episode did not finish")
        ep = final["summary"]
        gen = sum(s["generated_tokens"] for s in step_logs[i])
        metrics = {
            "em": final["em"],
            "f1": final["f1"],
            "contains": final["contains"],
            "evidence_recall": final["evidence_recall"],
            "searches": ep["searches"],
            "queries": ep["queries"],
            "turns": ep["turns"],
            "invalid_turns": ep["invalid_turns"],
            "opens": ep["opens"],
            "answered": ep["answered"],
            "return": ep["return"],
            "generated_tokens": gen,
            "infra_errors": ep["infra_errors"],
            "retrieved_doc_ids": ep["retrieved_doc_ids"],
        }
        out.append(
            EpisodeResult(
                ex.id, ex.question, list(ex.answers), final["answer"], states[i].messages, step_logs[i], metrics
            )
        )
    return out


