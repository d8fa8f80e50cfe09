"""What a trainer trains on: the task's examples, and a resumable data order over them."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.trainers.config import TrainConfig


def task_examples(cfg: TrainConfig, retriever: Any = None, split: str | None = None) -> tuple[list[Any], Any]:
    """The configured task's examples of ``split`` (default ``cfg.split``) and a retriever over its corpus.

    ``cfg.max_examples`` keeps only the first N.
    """
    from searchenv.env import SearchQAEnv

    env = SearchQAEnv(
        cfg.task,
        corpus=cfg.corpus,
        retriever=cfg.retriever if retriever is None else retriever,
        split=split or cfg.split,
    )
    examples = list(env.examples)
    if cfg.max_examples is not None:
        examples = examples[: cfg.max_examples]
    return examples, env.retriever



class DataOrder:
    """Deterministic endless order over ``n`` items: a fresh permutation per epoch from ``(seed, epoch)``.

    The whole state is the cursor (items handed out so far), so resuming needs only that number.
    """

    def __init__(self, n: int, seed: int, cursor: int = 0, shuffle: bool = True) -> None:
        if n < 1:
            raise ValueError(f"need at least one item, got n={n}")
        self.n, self.seed, self.cursor, self.shuffle = n, seed, cursor, shuffle
        self._perm_epoch = -1
        self._perm = np.arange(n)

    def _perm_for(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = (
                np.random.default_rng([self.seed, epoch]).permutation(self.n) if self.shuffle else np.arange(self.n)
            )
            self._perm_epoch = epoch
        return self._perm

    def take(self, k: int) -> list[int]:
        """The next ``k`` item indices (wrapping into a new epoch as needed)."""
        out = []
        for _ in range(k):
            epoch, pos = divmod(self.cursor, self.n)
            out.append(int(self._perm_for(epoch)[pos]))
            self.cursor += 1
        return out
