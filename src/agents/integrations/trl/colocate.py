"""The vLLM policy of the ``rollout_func`` path when TRL colocates vLLM: :class:`TRLColocatePolicy`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.policies.vllm import VLLMPolicy


class TRLColocatePolicy(VLLMPolicy):
    """Generation through TRL's own colocated vLLM entry point, ``trainer.vllm_generation.generate``.

    TRL's entry point is what keeps a colocated engine correct across processes: with
    ``vllm_tensor_parallel_size > 1`` it gathers the prompts of the ranks sharing an engine (each
    must send the same batch) and hands each rank its share; with ``vllm_enable_sleep_mode`` it
    wakes the key/value cache before generating, re-syncs weights that sleep discarded, and puts
    the engine back to sleep. It also applies TRL's sampling settings (``top_k``, ``min_p``,
    ``repetition_penalty``, ``generation_kwargs``). Each call here sets the turn's own settings
    (stop strings kept in the output, ``max_new_tokens``, temperature, top-p) on TRL's generation
    object for that call only.

    Multi-turn episodes end after different numbers of turns on different ranks, while TRL's
    gather is a collective that expects the same batch size and request from every rank: each call
    first agrees with the other ranks sharing the engine on the round's width and settings
    (:meth:`_agree`), and :meth:`drain` keeps a finished rank taking part (with one-token filler
    prompts) until all are done. Seeds are TRL's (its engine is seeded per rank):
    samples repeat for a fixed world size, not per prompt.

    Args:
        generation: TRL's ``VLLMGeneration`` (``trainer.vllm_generation``) in colocate mode.
        tokenizer: The model's tokenizer (the trainer's ``processing_class``).
    """

    def __init__(self, generation: Any, tokenizer: Any) -> None:
        self.llm = None  # the engine is TRL's: reached only through ``generation``
        self.generation = generation
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(
            t for t in (getattr(tokenizer, "eos_token_id", None),) if isinstance(t, int)
        )
        size = int(getattr(generation, "tensor_parallel_size", 1) or 1)
        self.group = getattr(generation, "tp_group", None) if size > 1 else None
        self.group_size = size

    def _agree(self, n: int, settings: tuple[Any, ...]) -> tuple[int, tuple[Any, ...]]:
        """The round's batch width and sampling settings, agreed by the ranks sharing the engine.

        TRL's gather hands rank ``r`` the completions at ``[r * n, (r + 1) * n)``, and every rank
        of a tensor-parallel engine must run the same request: so each rank sends as many prompts
        as the busiest one (padded with one-token fillers) with the same settings (the busiest
        ``max_new_tokens``; a rank that asked for fewer is cut by the rollout engine, and a prefix
        of a sample is a sample with the smaller limit). A collective when the engine is shared.
        """
        if self.group is None:
            return n, settings
        import torch.distributed as dist

        items: list[Any] = [None] * self.group_size
        dist.all_gather_object(items, (n, settings), group=self.group)
        active = [tuple(st) for c, st in items if int(c) > 0]
        if not active:
            return 0, settings
        stop, _, temperature, top_p = active[0]
        return max(int(c) for c, _ in items), (stop, max(int(st[1]) for st in active), temperature, top_p)

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[str],
        *,
        stop: Sequence[str] = (),
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
    ) -> list[Any]:
        """Continue every prompt through TRL's generation (see :class:`~agents.policies.base.Policy`).

        ``seed`` is checked but not used: TRL's engine has its own per-rank seed.
        """
        ids, _ = self._prepare(prompts, stop, max_new_tokens, temperature, top_p, seed)
        width, settings = self._agree(len(ids), (tuple(stop), int(max_new_tokens), float(temperature), float(top_p)))
        if width == 0:
            return []
        padded = ids + [[self._filler_id()]] * (width - len(ids))
        return self._call(padded, *settings)[: len(ids)]

    def drain(self) -> None:
        """Take part in the other ranks' generation rounds until no rank sharing the engine generates."""
        while True:
            width, settings = self._agree(0, ((), 1, 0.0, 1.0))
            if width == 0:
                return
            self._call([[self._filler_id()]] * width, *settings)

    def _filler_id(self) -> int:
        return min(self.eos_token_ids) if self.eos_token_ids else 0

    def _call(self, ids: list[list[int]], stop: Sequence[str], max_new_tokens: int, temperature: float,
              top_p: float) -> list[Any]:
        from agents.policies.base import Generation
        from agents.policies.vllm import finish_reason

        gen = self.generation
        saved = {k: getattr(gen, k) for k in ("temperature", "top_p", "max_completion_length", "generation_kwargs")}
        gen.temperature = float(temperature)
        gen.top_p = float(top_p) if temperature > 0 else 1.0
        gen.max_completion_length = int(max_new_tokens)
        gen.generation_kwargs = {**dict(saved["generation_kwargs"] or {}), "stop": list(stop) or None,
                                 "include_stop_str_in_output": True}
        try:
            _, completions, logprobs, _ = gen.generate(ids, None, 1)
        finally:
            for k, v in saved.items():
                setattr(gen, k, v)
        if len(completions) != len(ids):
            raise RuntimeError(f"TRL's vLLM generation returned {len(completions)} completions for {len(ids)} prompts")
        per_seq = logprobs or [None] * len(completions)
        results = []
        for comp, lps in zip(completions, per_seq, strict=True):
            token_ids = tuple(int(t) for t in comp)
            lp = None
            if lps is not None:
                lp = tuple(float("nan") if not step or step[0] is None else float(step[0]) for step in lps)
            text = self.decode(token_ids)
            results.append(Generation(text, token_ids, lp,
                                      finish_reason(text, token_ids, stop, self.eos_token_ids, max_new_tokens)))
        return results
