"""The two decode loops of :class:`~agents.policies.hf.HFPolicy`, stop-string checks, and the fixed-shape step.

:func:`decode_dynamic` (the host reads every sampled token and drops finished rows) and
:func:`decode_static` (fixed shapes, a host read every ``sync_every`` steps, optionally each step
through a :class:`FixedShapeStep`, kept per bucket across calls and captured as a CUDA graph on
CUDA) work on what the policy hands them in a :class:`DecodeContext`. The policy's module
docstring says how the two agree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.policies.hf.sampling import _row_uniforms, _sample, _sample_uniform

#: Counters of the fixed-shape decode step in :attr:`HFPolicy.stats`: graphs captured (one per
#: bucket, kept across calls), steps replayed from one, captures that failed (the step then runs
#: eagerly), fixed steps run eagerly, and buckets dropped to make room for another (least recently used).
GRAPH_STATS = ("graph_captures", "graph_replays", "graph_fallbacks", "fixed_eager_steps", "graph_evictions")

if TYPE_CHECKING:
    import torch

    from agents.policies.hf.graphs import Capture


def _sync(t: torch.Tensor) -> None:
    """Wait for the device (timings on CUDA)."""
    if t.is_cuda:
        import torch

        torch.cuda.synchronize(t.device)


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the end of the earliest-ending stop string (unchanged if none occurs)."""
    ends = [text.find(s) + len(s) for s in stop if s in text]
    return text[: min(ends)] if ends else text


def _stop_window(stop: Sequence[str]) -> int:
    """How many trailing tokens are decoded to look for stop strings."""
    return max((len(s) for s in stop), default=0) + 16


def _first_stop(
    decode: Callable[[Sequence[int]], str],
    ids: Sequence[int],
    start: int,
    stop: Sequence[str],
    window: int,
    candidates: np.ndarray | None,
) -> int | None:
    """The first ``j >= start`` where ``decode(ids[:j + 1][-window:])`` contains a stop string, else None.

    The dynamic loop runs this test after every token; here only tokens marked in ``candidates``
    (see :meth:`HFPolicy._stop_candidates`) are decoded, which gives the same answer when no stop
    string occurs before ``start``. ``candidates=None`` tests every token.
    """
    for j in range(start, len(ids)):
        if candidates is not None and ids[j] < len(candidates) and not candidates[ids[j]]:
            continue
        text = decode(ids[max(0, j + 1 - window) : j + 1])
        if any(s in text for s in stop):
            return j
    return None


@dataclass
class DecodeContext:
    """What a decode loop works with, handed over by the policy for one chunk of a ``generate`` call.

    Attributes:
        forward: One cached forward pass of the generating model: ``forward(input_ids=...,
            attention_mask=..., position_ids=..., past_key_values=...)`` -> float32 last-position logits.
        keep: Store a finished row's key/values for the prefix cache: ``keep(prompt, generated,
            cache, mask, row, width)``.
        text: Token ids -> text (special tokens left out), where stop strings are looked for.
        eos_token_ids: Tokens that end a sequence.
        pad_token_id: What a finished row is fed.
        device: The generating model's device.
        stats: The policy's work counters, added to.
        capture: How a fixed-shape step is captured (None: a CUDA graph on CUDA, eager elsewhere).
    """

    forward: Callable[..., torch.Tensor]
    keep: Callable[[list[int], list[int], Any, torch.Tensor, int, int], None]
    text: Callable[[Sequence[int]], str]
    eos_token_ids: frozenset[int]
    pad_token_id: int
    device: torch.device
    stats: dict[str, float]
    capture: Capture | None = None


def decode_dynamic(
    ctx: DecodeContext,
    prompts: list[list[int]],
    generators: list[torch.Generator],
    cache: Any,
    mask: torch.Tensor,
    lengths: torch.Tensor,
    last_logits: torch.Tensor,
    stop: tuple[str, ...],
    max_new: int,
    temperature: float,
    top_p: float,
) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
    """The reference decode loop: tokens read every step, finished rows dropped from the batch."""
    import torch

    device = ctx.device
    n = len(prompts)
    gen_ids: list[list[int]] = [[] for _ in range(n)]
    gen_lps: list[list[float]] = [[] for _ in range(n)]
    finish: list[str | None] = [None] * n
    stop_window = _stop_window(stop)
    rows = list(range(n))  # batch position -> row
    width = cache.layers[0].length
    logits = last_logits
    while True:
        live = [b for b, r in enumerate(rows) if finish[r] is None]
        toks, lps = _sample(logits[live], temperature, top_p, [generators[rows[b]] for b in live])
        for b, t, lp in zip(live, toks.tolist(), lps.tolist(), strict=True):
            r = rows[b]
            gen_ids[r].append(t)
            gen_lps[r].append(lp)
            if t in ctx.eos_token_ids:
                finish[r] = "eos"
            elif stop and any(s in ctx.text(gen_ids[r][-stop_window:]) for s in stop):
                finish[r] = "stop"
            elif len(gen_ids[r]) >= max_new:
                finish[r] = "length"
        done = [b for b, r in enumerate(rows) if finish[r] is not None]
        if len(done) == len(rows):
            break
        if len(done) * 4 >= len(rows):  # drop finished rows from the batch
            for b in done:
                ctx.keep(prompts[rows[b]], gen_ids[rows[b]], cache, mask, b, width)
            keep = [b for b, r in enumerate(rows) if finish[r] is None]
            index = torch.tensor(keep, device=device)
            for layer in cache.layers:
                layer.select_rows(index)
            mask, lengths = mask[index], lengths[index]
            rows = [rows[b] for b in keep]
        live_mask = torch.tensor([finish[r] is None for r in rows], device=device)
        step_ids = torch.tensor(
            [gen_ids[r][-1] if finish[r] is None else ctx.pad_token_id for r in rows], device=device
        )
        mask[:, width] = live_mask
        t0 = time.perf_counter()
        logits = ctx.forward(
            input_ids=step_ids[:, None],
            attention_mask=mask[:, : width + 1],
            position_ids=lengths[:, None].clone(),
            past_key_values=cache,
        )
        width += 1
        lengths += live_mask.long()
        _sync(logits)
        ctx.stats["decode_seconds"] += time.perf_counter() - t0
        ctx.stats["decode_steps"] += 1
        ctx.stats["decode_positions"] += len(rows)
        ctx.stats["decode_tokens"] += int(live_mask.sum())
    for b, r in enumerate(rows):
        ctx.keep(prompts[r], gen_ids[r], cache, mask, b, width)
    return gen_ids, gen_lps, finish


def decode_static(
    ctx: DecodeContext,
    prompts: list[list[int]],
    generators: list[torch.Generator],
    cache: Any,
    mask: torch.Tensor,
    lengths: torch.Tensor,
    last_logits: torch.Tensor,
    stop: tuple[str, ...],
    max_new: int,
    temperature: float,
    top_p: float,
    *,
    sync_every: int,
    candidates: np.ndarray | None,
    step_fn: FixedShapeStep | None = None,
) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
    """The same samples as :func:`decode_dynamic` with fixed shapes and a host read every ``sync_every`` steps.

    Every row stays in the batch until the end; a row that has finished is fed the pad token with
    its attention column masked. End-of-sequence is tracked on the device; the sampled tokens
    accumulate in a device buffer that the host copies every ``sync_every`` steps, then checks
    stop strings and lengths over those steps in order. A row found to have stopped at step
    ``s`` keeps its tokens up to ``s``; tokens sampled for it after that are discarded, and the
    cache columns it was fed after ``s`` are masked, so what ``ctx.keep`` stores is exactly its
    prompt and the tokens the dynamic loop would have fed. Stop strings are decoded only at tokens
    marked in ``candidates`` (see ``HFPolicy._stop_candidates``; None: at every token). With
    ``step_fn`` (a bucket's :class:`FixedShapeStep`, whose buffers ``cache`` and ``mask`` then are)
    each step runs over the whole buffer, captured where possible; without, each step calls the
    model as the dynamic loop does.
    """
    import torch

    device = ctx.device
    n = len(prompts)
    total = cache.layers[0].length  # prompt columns; generated token j is fed at column total + j
    # Each row's uniforms for every step, drawn up front from its own generator: on a CPU
    # generator torch.rand(k) gives exactly the values of k calls of torch.rand(1) (tested), so
    # the samples are the dynamic loop's.
    uniforms = _row_uniforms(generators, max_new).to(device) if temperature > 0 else None
    eos = torch.tensor(sorted(ctx.eos_token_ids), dtype=torch.long, device=device)
    eos_np = eos.cpu().numpy()
    toks_buf = torch.zeros((n, max_new), dtype=torch.long, device=device)
    lps_buf = torch.zeros((n, max_new), dtype=torch.float32, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    pad = torch.full((n,), ctx.pad_token_id, dtype=torch.long, device=device)
    gen_ids: list[list[int]] = [[] for _ in range(n)]
    gen_lps: list[list[float]] = [[] for _ in range(n)]
    finish: list[str | None] = [None] * n
    width, synced = total, 0
    t0 = time.perf_counter()
    logits = last_logits
    try:
        for step in range(max_new):
            u = uniforms[:, step] if uniforms is not None else None
            toks, lps = _sample_uniform(logits, temperature, top_p, u)
            toks_buf[:, step] = toks
            lps_buf[:, step] = lps
            if len(eos):
                done |= torch.isin(toks, eos)
            if step + 1 == max_new or step + 1 - synced >= sync_every:
                stopped = read_steps(
                    ctx.text,
                    toks_buf[:, synced : step + 1], lps_buf[:, synced : step + 1], eos_np,
                    gen_ids, gen_lps, finish, stop, candidates, max_new,
                )
                synced = step + 1
                for r, s in stopped:  # found late: mask the columns fed after the stop
                    done[r] = True
                    mask[r, total + s : width] = 0
                if all(f is not None for f in finish):
                    break
            live = ~done
            mask[:, width] = live
            step_ids = torch.where(live, toks, pad)
            if step_fn is not None:
                logits = step_fn(step_ids, lengths, width, ctx.stats, ctx.capture)
            else:
                logits = ctx.forward(
                    input_ids=step_ids[:, None], attention_mask=mask[:, : width + 1],
                    position_ids=lengths[:, None].clone(), past_key_values=cache,
                )
            width += 1
            lengths += live.long()
            ctx.stats["decode_steps"] += 1
            ctx.stats["decode_positions"] += n
    finally:
        if step_fn is not None:
            step_fn.release()
    _sync(mask)
    ctx.stats["decode_seconds"] += time.perf_counter() - t0
    ctx.stats["decode_tokens"] += sum(len(g) - 1 for g in gen_ids)
    for b in range(n):
        ctx.keep(prompts[b], gen_ids[b], cache, mask, b, width)
    return gen_ids, gen_lps, finish


def read_steps(
    text_of: Callable[[Sequence[int]], str],
    toks: torch.Tensor,
    lps: torch.Tensor,
    eos: np.ndarray,
    gen_ids: list[list[int]],
    gen_lps: list[list[float]],
    finish: list[str | None],
    stop: tuple[str, ...],
    candidates: np.ndarray | None,
    max_new: int,
) -> list[tuple[int, int]]:
    """Append a block of steps ``[rows, k]`` to the unfinished rows, checking ends in the dynamic order.

    Per token: end-of-sequence first, then stop strings, then the length cap. Returns
    ``(row, step)`` for each row that a stop string ended in this block.
    """
    toks_np = toks.cpu().numpy()  # the one host read of the block
    lps_np = lps.cpu().numpy()
    k = toks_np.shape[1]
    is_eos = np.isin(toks_np, eos)
    window = _stop_window(stop)
    if candidates is not None:
        any_candidate = candidates[np.minimum(toks_np, len(candidates) - 1)] | (toks_np >= len(candidates))
    stopped: list[tuple[int, int]] = []
    for r in range(len(finish)):
        if finish[r] is not None:
            continue
        row = toks_np[r].tolist()
        base = len(gen_ids[r])
        hits = np.flatnonzero(is_eos[r])
        end, reason = (int(hits[0]) + 1, "eos") if len(hits) else (k, None)
        checked = end - 1 if reason == "eos" else end  # the eos token itself is not checked
        if stop and (candidates is None or any_candidate[r, :checked].any()):
            tail = gen_ids[r][-window:]  # enough context: each check decodes at most `window` tokens
            j = _first_stop(text_of, tail + row[:checked], len(tail), stop, window, candidates)
            if j is not None:
                end, reason = j - len(tail) + 1, "stop"
                stopped.append((r, base + j - len(tail)))
        if reason is None and base + end >= max_new:
            reason = "length"
        gen_ids[r].extend(row[:end])
        gen_lps[r].extend(lps_np[r, :end].tolist())
        finish[r] = reason
    return stopped


class FixedShapeStep:
    """The fixed-shape decode step over one bucket's buffers, kept across calls: ``(tokens, positions, col) -> logits``.

    Every call has the same shapes: the cache layers write at a position held in a tensor and
    attention runs over the whole buffer under a ``[rows, 1, 1, capacity]`` boolean mask, built
    here (transformers passes a 4-D mask through unchanged). The buffers are the bucket's
    (``rows`` and ``capacity`` rounded up, see :mod:`agents.policies.hf.graphs`): a call with fewer
    rows fills the first ones; the others attend to one column and their logits are never read.
    Where a capture is available (a ``torch.cuda.CUDAGraph`` on CUDA, or the policy's
    ``graph_capture``) the step is captured on its first call and replayed ever after, by this call
    and by every later call of the same bucket, with inputs copied into its static tensors; if the
    capture fails the step runs eagerly (with a warning, counted in ``graph_fallbacks``). The
    logits a replay returns live in the graph's output buffer and are overwritten by the next
    replay, which the static loop only calls after sampling from them.

    Args:
        forward: The generating model's cached forward pass (as :attr:`DecodeContext.forward`).
        model: That model (a captured graph reads its weights where they are).
        pad_token_id: What the rows beyond a call's are fed.
        rows: Rows of the bucket.
        capacity: Key/value positions of the bucket.
        shapes: ``(heads, head size)`` per layer of the key/value cache.
        dtype: The cache's dtype (the generating weights').
        device: The model's device.
    """

    def __init__(
        self, forward: Callable[..., torch.Tensor], model: Any, pad_token_id: int, rows: int, capacity: int,
        shapes: list[tuple[int, int]], dtype: torch.dtype, device: torch.device,
    ) -> None:
        import torch

        from agents.policies.hf.kv_cache import _buffer_cache

        self.forward, self.model, self.pad_token_id = forward, model, pad_token_id
        self.rows, self.capacity = rows, capacity
        # Zeros, never uninitialised: masked columns still enter the products (with weight 0), and
        # a stray NaN would spread. Later calls leave finite values from earlier ones, also masked.
        layers = []
        for heads, dim in shapes:
            kb = torch.zeros((rows, heads, capacity, dim), dtype=dtype, device=device)
            layers.append((kb, torch.zeros_like(kb)))
        self.cache = _buffer_cache(layers, 0)
        self.mask = torch.zeros((rows, capacity), dtype=torch.long, device=device)
        self.ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.pos = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.mask4 = torch.zeros((rows, 1, 1, capacity), dtype=torch.bool, device=device)
        self.col = torch.zeros(1, dtype=torch.long, device=device)
        self.graph: Any = None
        self.capture_failed = False

    def load(self, cache: Any, mask: torch.Tensor, index: torch.Tensor) -> tuple[Any, torch.Tensor]:
        """Copy prefilled rows ``index`` of ``cache``/``mask`` into the buffers; return the cache and the rows' mask."""
        n, total = len(index), cache.layers[0].length
        for dst, src in zip(self.cache.layers, cache.layers, strict=True):
            dst.kbuf[:n, :, :total] = src.kbuf[:, :, :total].index_select(0, index)
            dst.vbuf[:n, :, :total] = src.vbuf[:, :, :total].index_select(0, index)
            dst.length = total
            dst._views()
            dst.write_at = self.col
        self.mask.zero_()
        self.mask[:n, : mask.shape[1]] = mask.index_select(0, index)
        self.mask[n:, 0] = 1  # rows beyond the call's attend to one column: finite, never read
        self.ids[n:] = self.pad_token_id
        self.pos[n:] = 0
        return self.cache, self.mask[:n]

    def __call__(
        self, ids: torch.Tensor, lengths: torch.Tensor, width: int, stats: dict[str, float], capture: Capture | None,
    ) -> torch.Tensor:
        """The next logits of the call's rows; ``stats`` counts the step, ``capture`` captures it on first use."""
        n = len(ids)
        self.ids[:n].copy_(ids[:, None])
        self.pos[:n].copy_(lengths[:, None])
        self.mask4[:, 0, 0].copy_(self.mask)
        self.col.fill_(width)
        if self.graph is None and not self.capture_failed:
            self._capture(stats, capture)
        if self.graph is None:
            stats["fixed_eager_steps"] += 1
            return self._forward()[:n]
        self.graph.replay()
        stats["graph_replays"] += 1
        return self.graph.out[:n]

    def _forward(self) -> torch.Tensor:
        return self.forward(
            input_ids=self.ids, attention_mask=self.mask4, position_ids=self.pos, past_key_values=self.cache
        )

    def _capture(self, stats: dict[str, float], capture: Capture | None) -> None:
        import warnings

        from agents.policies.hf.graphs import capture_cuda

        device = self.mask.device
        capture = capture or (capture_cuda if device.type == "cuda" else None)
        if capture is None:
            self.capture_failed = True  # nothing can capture here: eager steps
            return
        reads = [*self.model.parameters(), *self.model.buffers(), self.ids, self.pos, self.mask4, self.col]
        reads += [t for layer in self.cache.layers for t in (layer.kbuf, layer.vbuf)]
        try:
            self.graph = capture(self._forward, reads, device)
        except RuntimeError as err:  # something in the forward pass syncs with the host
            warnings.warn(f"graph capture of the decode step failed ({err}); running it eagerly", stacklevel=4)
            self.capture_failed = True
            stats["graph_fallbacks"] += 1
            return
        stats["graph_captures"] += 1

    def release(self) -> None:
        """Return the cache layers to their growing mode (the buffers and the graph stay for the next call)."""
        for layer in self.cache.layers:
            layer.write_at = None
