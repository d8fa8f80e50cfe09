"""UR2's difficulty-aware routing: closed-book for what the policy knows, retrieval for the rest.

Each training question's difficulty is the policy's own closed-book success rate: ``samples``
episodes of one turn under a prompt that asks for the answer without searching, scored by exact
match. The rate is cached per question and estimated again once it is ``refresh`` steps old, so
it follows the policy as it learns. Questions at or above ``threshold`` are *easy*: their GRPO
group is rolled out closed-book (one turn, the closed-book prompt), which trains the policy to
answer what it knows without paying for search. The others are *hard* and are rolled out with
the environment's protocol and retrieval as usual.

:class:`DifficultyCache` is plain JSON (saved with each checkpoint), so a resumed run routes
exactly as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def closed_book_protocol(protocol: Any) -> Any:
    """The environment protocol (name or instance) with the closed-book system prompt."""
    from agents.reference import with_system_prompt
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
    from agents.trainers.common import run_rollouts

    if not examples:
        return {}
    eps = run_rollouts(policy, examples, retriever, cfg, group_size=samples, seed=seed, timer=timer,
                       protocol=closed_book_protocol(cfg.protocol), max_turns=1, reward="default")
    hits: dict[int, list[float]] = {}
    for ep in eps:
        hits.setdefault(ep.group, []).append(ep.em)
    return {examples[g].id: sum(v) / len(v) for g, v in hits.items()}


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
    from agents.trainers.common import run_rollouts

    ids = [ex.id for ex in examples]
    stale = set(cache.stale(ids, step, cfg.difficulty_refresh))
    if stale:
        fresh = [ex for ex in examples if ex.id in stale]
        fresh = list({ex.id: ex for ex in fresh}.values())
        cache.update(estimate_closed_book(policy, fresh, retriever, cfg, samples=cfg.closed_book_samples,
                                          seed=seed + 5_000_011, timer=timer), step)
    easy = [cache.rate(q) >= cfg.closed_book_threshold for q in ids]
    episodes: list[Any] = [None] * (len(examples) * group_size)
    for closed in (False, True):
        positions = [i for i, e in enumerate(easy) if e == closed]
        if not positions:
            continue
        extra = {"protocol": closed_book_protocol(cfg.protocol), "max_turns": 1} if closed else {}
        eps = run_rollouts(policy, [examples[i] for i in positions], retriever, cfg, group_size=group_size,
                           seed=seed + (7_919 if closed else 0), timer=timer, reward=reward, **extra)
        for j, ep in enumerate(eps):  # example-major: episode j is sample j % group_size of example j // group_size
            pos = positions[j // group_size]
            ep.group = pos
            episodes[pos * group_size + j % group_size] = ep
    return episodes, easy
