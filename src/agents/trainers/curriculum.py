"""UR2's difficulty-aware routing: closed-book for what the policy knows, retrieval for the rest.

Each training question's difficulty is the policy's own closed-book success rate: ``samples``
episodes of one turn under a prompt that asks for the answer without searching, scored by exact
match. The rate is cached per question and estimated again once it is ``refresh`` steps old, so
it follows the policy as it learns. Questions at or above ``threshold`` are *easy*: their GRPO
group is rolled out closed-book (one turn, the closed-book prompt), which trains the policy to
answer what it knows without paying for search. The others are *hard* and are rolled out with
the environment's protocol and retrieval as usual.

As a schedule, ``hard_share = (first, last)`` sets the share of hard questions in each batch,
moving linearly from ``first`` at the first step to ``last`` at the last: each step draws
``pool`` times the batch of candidates, estimates them, and keeps that many hard ones and the
rest easy (filling from the other kind when one runs short), for instance easy-to-hard with
``(0.25, 1.0)``.

:class:`DifficultyCache` is plain JSON (saved with each checkpoint), so a resumed run routes
exactly as an uninterrupted one.

A GRPO step calls its curriculum's two phases each sampling round: :meth:`Curriculum.questions`
(which questions) and :meth:`Curriculum.roll_out` (their groups' episodes). :class:`DrawnOrder` is
no curriculum (the run's data order, every group with retrieval), :class:`UR2Curriculum` the
above; :func:`curriculum_for` picks one from the configuration. A round's seeds derive from its
seed by :func:`~agents.rollout.seeds.phase_seed`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from agents.rollout.seeds import phase_seed

#: The system prompt of closed-book episodes (search-r1 tags: the answer goes in <answer>).
CLOSED_BOOK_PROMPT = (
    "Answer the question from what you know, without searching. Think briefly inside <think> and "
    "</think> if you need to, then write a short answer (a name, place, year or a few words) inside "
    "<answer> and </answer>, for example <answer> Ostrava </answer>."
)
DIFFICULTY_FILE = "difficulty.json"


class DifficultyCache:
    """Closed-book success rate per question id, with the step it was estimated at."""

    def __init__(self, entries: dict[str, tuple[float, int]] | None = None) -> None:
        self.entries: dict[str, tuple[float, int]] = dict(entries or {})

    def stale(self, ids: Sequence[str], step: int, refresh: int) -> list[str]:
        """Ids (in order, each once) with no estimate or one at least ``refresh`` steps old."""
        out: list[str] = []
        for qid in ids:
            known = self.entries.get(qid)
            if (known is None or step - known[1] >= refresh) and qid not in out:
                out.append(qid)
        return out

    def update(self, rates: dict[str, float], step: int) -> None:
        """Record fresh estimates made at ``step``."""
        for qid, rate in rates.items():
            self.entries[qid] = (float(rate), int(step))

    def rate(self, qid: str) -> float:
        """The cached closed-book success rate of ``qid``.

        Raises:
            KeyError: If it was never estimated.
        """
        return self.entries[qid][0]

    def save(self, folder: str | os.PathLike[str]) -> None:
        """Write ``difficulty.json`` into ``folder`` (a temporary file, then rename)."""
        path = Path(folder) / DIFFICULTY_FILE
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({q: [r, s] for q, (r, s) in sorted(self.entries.items())}), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> DifficultyCache:
        """Read ``difficulty.json`` from ``folder`` (an empty cache when there is none).

        Raises:
            ValueError: If the file is malformed (naming it).
        """
        path = Path(folder) / DIFFICULTY_FILE
        if not path.is_file():
            return cls()
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls({str(q): (float(v[0]), int(v[1])) for q, v in raw.items()})
        except (ValueError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(f"{path}: malformed difficulty cache ({exc})") from None


def scheduled_share(hard_share: Sequence[float], step: int, steps: int) -> float:
    """The share of hard questions at ``step`` (1-based) of ``steps``: linear from first to last."""
    first, last = float(hard_share[0]), float(hard_share[1])
    progress = (step - 1) / (steps - 1) if steps > 1 else 1.0
    return first + (last - first) * min(max(progress, 0.0), 1.0)


def select_by_share(ids: Sequence[str], cache: DifficultyCache, threshold: float, need: int,
                    share: float) -> list[int]:
    """Positions in ``ids`` of ``need`` candidates with ``round(share * need)`` hard ones (if there are).

    Candidates keep their drawn order within each kind; a kind that runs short is filled from the other.
    """
    hard = [i for i, q in enumerate(ids) if cache.rate(q) < threshold]
    easy = [i for i, q in enumerate(ids) if cache.rate(q) >= threshold]
    n_hard = min(len(hard), round(share * need))
    n_easy = min(len(easy), need - n_hard)
    n_hard = min(len(hard), need - n_easy)
    return sorted(hard[:n_hard] + easy[:n_easy])


def scheduled_questions(policy: Any, examples: Sequence[Any], retriever: Any, cfg: Any, cache: DifficultyCache,
                        order: Any, need: int, *, step: int, seed: int, timer: Any) -> list[int]:
    """UR2's schedule: indices into ``examples`` of ``need`` questions with the scheduled hard share.

    Draws ``cfg.curriculum_pool x need`` candidates from ``order`` and estimates the stale ones first.
    """
    pool = order.take(need * cfg.curriculum_pool)
    ids = [examples[i].id for i in pool]
    refresh_estimates(policy, [examples[i] for i in pool], retriever, cfg, cache, step=step, seed=seed, timer=timer)
    share = scheduled_share(cfg.hard_share, step, cfg.steps)
    return [pool[i] for i in select_by_share(ids, cache, cfg.closed_book_threshold, need, share)]


def closed_book_protocol(protocol: Any) -> Any:
    """The environment protocol (name or instance) with the closed-book system prompt."""
    from agents.baselines import with_system_prompt
    from searchenv.protocols import get_protocol

    base = get_protocol(protocol) if isinstance(protocol, str) else protocol
    return with_system_prompt(base, CLOSED_BOOK_PROMPT)


def estimate_closed_book(
    policy: Any,
    examples: Sequence[Any],
    retriever: Any,
    cfg: Any,
    *,
    samples: int,
    seed: int,
    timer: Any,
) -> dict[str, float]:
    """Closed-book exact-match rate of each example over ``samples`` one-turn episodes.

    Returns:
        Example id -> success rate in [0, 1].
    """
    from agents.trainers.episodes import run_rollouts

    if not examples:
        return {}
    eps = run_rollouts(policy, examples, retriever, cfg, group_size=samples, seed=seed, timer=timer,
                       protocol=closed_book_protocol(cfg.protocol), max_turns=1, reward="default")
    hits: dict[int, list[float]] = {}
    for ep in eps:
        hits.setdefault(ep.group, []).append(ep.em)
    return {examples[g].id: sum(v) / len(v) for g, v in hits.items()}


def refresh_estimates(policy: Any, examples: Sequence[Any], retriever: Any, cfg: Any, cache: DifficultyCache,
                      *, step: int, seed: int, timer: Any) -> None:
    """Estimate the examples whose cached difficulty is missing or ``cfg.difficulty_refresh`` steps old."""
    stale = set(cache.stale([ex.id for ex in examples], step, cfg.difficulty_refresh))
    if stale:
        fresh = list({ex.id: ex for ex in examples if ex.id in stale}.values())
        cache.update(estimate_closed_book(policy, fresh, retriever, cfg, samples=cfg.closed_book_samples,
                                          seed=phase_seed(seed, "closed_book_estimate"), timer=timer), step)


def route_and_roll_out(
    policy: Any,
    examples: Sequence[Any],
    retriever: Any,
    cfg: Any,
    cache: DifficultyCache,
    *,
    step: int,
    group_size: int,
    seed: int,
    timer: Any,
    reward: Any,
) -> tuple[list[Any], list[bool]]:
    """Roll out ``group_size`` episodes per example, easy ones closed-book, hard ones with retrieval.

    Estimates stale difficulties first (``cfg.closed_book_samples`` samples each, refreshed every
    ``cfg.difficulty_refresh`` steps) and caches them.

    Returns:
        ``(episodes, easy)``: the episodes example-major with ``group`` the example's position, and
        for each example whether it was routed closed-book.
    """
    from agents.trainers.episodes import run_rollouts

    ids = [ex.id for ex in examples]
    refresh_estimates(policy, examples, retriever, cfg, cache, step=step, seed=seed, timer=timer)
    easy = [cache.rate(q) >= cfg.closed_book_threshold for q in ids]
    episodes: list[Any] = [None] * (len(examples) * group_size)
    for closed in (False, True):
        positions = [i for i, e in enumerate(easy) if e == closed]
        if not positions:
            continue
        extra = {"protocol": closed_book_protocol(cfg.protocol), "max_turns": 1} if closed else {}
        eps = run_rollouts(policy, [examples[i] for i in positions], retriever, cfg, group_size=group_size,
                           seed=phase_seed(seed, "closed_book") if closed else seed, timer=timer, reward=reward,
                           **extra)
        for j, ep in enumerate(eps):  # example-major: episode j is sample j % group_size of example j // group_size
            pos = positions[j // group_size]
            ep.group = pos
            episodes[pos * group_size + j % group_size] = ep
    return episodes, easy


# ---- the curriculum as a GRPO step calls it ------------------------------------------------------


class Curriculum(Protocol):
    """What a GRPO step asks of its curriculum, each sampling round (seeded with the round's seed)."""

    def questions(self, need: int, *, step: int, seed: int, timer: Any) -> list[int]:
        """Indices into the run's examples of the ``need`` questions the round rolls out."""
        ...

    def roll_out(self, questions: Sequence[int], *, step: int, seed: int, timer: Any) -> tuple[list[Any], int]:
        """``group_size`` episodes per question (``group``: its position), and how many groups went closed-book."""
        ...


class DrawnOrder:
    """No curriculum: questions in the run's data order, every group rolled out with retrieval.

    Args:
        run: The GRPO run (:class:`~agents.trainers.rl_run.RLRun`).
        cfg: The GRPO configuration.
        reward: The reward callable overriding ``cfg.reward``, or None.
    """

    def __init__(self, run: Any, cfg: Any, reward: Any) -> None:
        self.run, self.cfg, self.reward = run, cfg, reward

    def questions(self, need: int, *, step: int, seed: int, timer: Any) -> list[int]:
        """The next ``need`` questions of the run's data order."""
        return self.run.order.take(need)

    def roll_out(self, questions: Sequence[int], *, step: int, seed: int, timer: Any) -> tuple[list[Any], int]:
        """Every group with the environment's protocol and retrieval; none closed-book."""
        from agents.trainers.episodes import run_rollouts

        run = self.run
        return run_rollouts(run.policy, [run.examples[i] for i in questions], run.retriever, self.cfg,
                            group_size=self.cfg.group_size, seed=seed, timer=timer, reward=self.reward), 0


class UR2Curriculum(DrawnOrder):
    """UR2: route each question by its cached closed-book estimate; with ``hard_share``, choose by the schedule.

    The cache is written with each checkpoint of the run (and read back on resume by :func:`curriculum_for`).

    Args:
        run: The GRPO run.
        cfg: The GRPO configuration.
        reward: The reward callable overriding ``cfg.reward``, or None.
        cache: The difficulty estimates.
    """

    def __init__(self, run: Any, cfg: Any, reward: Any, cache: DifficultyCache) -> None:
        super().__init__(run, cfg, reward)
        self.cache = cache
        run.on_checkpoint = lambda: cache.save(run.run_dir)

    def questions(self, need: int, *, step: int, seed: int, timer: Any) -> list[int]:
        """The data order's next questions, or with ``hard_share`` :func:`scheduled_questions`."""
        if self.cfg.hard_share is None:
            return super().questions(need, step=step, seed=seed, timer=timer)
        run = self.run
        return scheduled_questions(run.policy, run.examples, run.retriever, self.cfg, self.cache, run.order, need,
                                   step=step, seed=seed, timer=timer)

    def roll_out(self, questions: Sequence[int], *, step: int, seed: int, timer: Any) -> tuple[list[Any], int]:
        """:func:`route_and_roll_out`: easy questions closed-book, hard ones with retrieval."""
        run = self.run
        episodes, easy = route_and_roll_out(run.policy, [run.examples[i] for i in questions], run.retriever, self.cfg,
                                            self.cache, step=step, group_size=self.cfg.group_size, seed=seed,
                                            timer=timer, reward=self.reward)
        return episodes, sum(easy)


def curriculum_for(cfg: Any, run: Any, *, reward: Any, resume: bool) -> Curriculum:
    """The curriculum ``cfg.curriculum`` names (``ur2`` or ``none``), its cache read back from the run on ``resume``."""
    if cfg.curriculum != "ur2":
        return DrawnOrder(run, cfg, reward)
    return UR2Curriculum(run, cfg, reward, DifficultyCache.load(run.run_dir) if resume else DifficultyCache())
