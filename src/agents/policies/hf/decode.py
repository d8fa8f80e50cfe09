"""The two decode loops of :class:`~agents.policies.hf.HFPolicy`, stop-string checks, and the CUDA-graph step.

:class:`DecodeLoops` is mixed into :class:`~agents.policies.hf.HFPolicy`: ``_decode_dynamic`` (the
host reads every sampled token and drops finished rows) and ``_decode_static`` (fixed shapes, a
host read every ``sync_every`` steps, optionally a fixed-shape step through :class:`_DecodeStep`,
kept per bucket across calls and captured as a CUDA graph on CUDA). The policy's module docstring
says how the two agree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.policies.hf.sampling import _row_uniforms, _sample, _sample_uniform

#: Counters of the fixed-shape decode step in :attr:`HFPolicy.stats`: graphs captured (one per
#: bucket, kept across calls), steps replayed from one, captures that failed (the step then runs
#: eagerly), fixed steps run eagerly, and buckets dropped to make room for another (least recently used).
GRAPH_STATS = ("graph_captures", "graph_replays", "graph_fallbacks", "fixed_eager_steps", "graph_evictions")

if TYPE_CHECKING:
    import torch

    from agents.policies.hf.graphs import Capture, SlotCache


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


class DecodeLoops:
    """The decode loops of :class:`~agents.policies.hf.HFPolicy` (a mixin: the policy sets what is declared here)."""

    model: Any
    tokenizer: Any
    stats: dict[str, float]
    sync_every: int
    cuda_graph: bool
    eos_token_ids: frozenset[int]
    pad_token_id: int
    _stop_candidate_sets: dict[tuple[Any, ...], np.ndarray | None]
    _pieces: tuple[int, list[str | None]] | None
    graph_capture: Capture | None
    _slots: SlotCache

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters (the policy's)."""
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (the policy's)."""
        raise NotImplementedError

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids`` (the policy's)."""
        raise NotImplementedError

    def _keep(
        self, prompt: list[int], generated: list[int], cache: Any, mask: torch.Tensor, b: int, width: int
    ) -> None:
        raise NotImplementedError

    def _last_logits(self, **inputs: Any) -> torch.Tensor:
        raise NotImplementedError

    def _generation_model(self) -> Any:
        """The model generation runs on (the policy's: the weights or their generation copy)."""
        raise NotImplementedError

    def _kv_shapes(self) -> list[tuple[int, int]]:
        raise NotImplementedError

    def _kv_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def _step_for(self, rows: int, capacity: int) -> _DecodeStep:
        """The kept fixed-shape step of the bucket of ``rows`` x ``capacity`` (built on first use).

        Kept per (rows bucket, capacity bucket, dtype, device) in :attr:`_slots`, at most
        ``graph_buckets`` of them; dropped all at once when the generation weights' storage moves
        (another model, a rebuilt generation copy, a move to another device), since a captured graph
        reads the weights where they were. Weights updated in place (an optimizer step, a refreshed
        generation copy) keep their storage, so the graphs stay and replay with the new values.
        """
        from agents.policies.hf.graphs import capacity_bucket, row_bucket, weights_key

        dtype, device = self._kv_dtype(), self.device
        key = (row_bucket(rows), capacity_bucket(capacity), dtype, device)
        evictions = self._slots.evictions
        step: _DecodeStep = self._slots.get(
            key, weights_key(self._generation_model()),
            lambda: _DecodeStep(self, key[0], key[1], self._kv_shapes(), dtype, device),
        )
        self.stats["graph_evictions"] += self._slots.evictions - evictions
        return step

    def _decode_dynamic(
        self,
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

        device = self.device
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
                if t in self.eos_token_ids:
                    finish[r] = "eos"
                elif stop and any(s in self.decode(gen_ids[r][-stop_window:]) for s in stop):
                    finish[r] = "stop"
                elif len(gen_ids[r]) >= max_new:
                    finish[r] = "length"
            done = [b for b, r in enumerate(rows) if finish[r] is not None]
            if len(done) == len(rows):
                break
            if len(done) * 4 >= len(rows):  # drop finished rows from the batch
                for b in done:
                    self._keep(prompts[rows[b]], gen_ids[rows[b]], cache, mask, b, width)
                keep = [b for b, r in enumerate(rows) if finish[r] is None]
                index = torch.tensor(keep, device=device)
                for layer in cache.layers:
                    layer.select_rows(index)
                mask, lengths = mask[index], lengths[index]
                rows = [rows[b] for b in keep]
            live_mask = torch.tensor([finish[r] is None for r in rows], device=device)
            step_ids = torch.tensor(
                [gen_ids[r][-1] if finish[r] is None else self.pad_token_id for r in rows], device=device
            )
            mask[:, width] = live_mask
            t0 = time.perf_counter()
            logits = self._last_logits(
                input_ids=step_ids[:, None],
                attention_mask=mask[:, : width + 1],
                position_ids=lengths[:, None].clone(),
                past_key_values=cache,
            )
            width += 1
            lengths += live_mask.long()
            _sync(logits)
            self.stats["decode_seconds"] += time.perf_counter() - t0
            self.stats["decode_steps"] += 1
            self.stats["decode_positions"] += len(rows)
            self.stats["decode_tokens"] += int(live_mask.sum())
        for b, r in enumerate(rows):
            self._keep(prompts[r], gen_ids[r], cache, mask, b, width)
        return gen_ids, gen_lps, finish

    def _decode_static(
        self,
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
        step_fn: _DecodeStep | None = None,
    ) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
        """The same samples as :meth:`_decode_dynamic` with fixed shapes and a host read every ``sync_every`` steps.

        Every row stays in the batch until the end; a row that has finished is fed the pad token with
        its attention column masked. End-of-sequence is tracked on the device; the sampled tokens
        accumulate in a device buffer that the host copies every ``sync_every`` steps, then checks
        stop strings and lengths over those steps in order. A row found to have stopped at step
        ``s`` keeps its tokens up to ``s``; tokens sampled for it after that are discarded, and the
        cache columns it was fed after ``s`` are masked, so what ``_keep`` stores is exactly its
        prompt and the tokens the dynamic loop would have fed. With ``step_fn`` (a bucket's
        :class:`_DecodeStep`, whose buffers ``cache`` and ``mask`` then are) each step runs over the
        whole buffer, captured where possible; without, each step calls the model as the dynamic
        loop does.
        """
        import torch

        device = self.device
        n = len(prompts)
        total = cache.layers[0].length  # prompt columns; generated token j is fed at column total + j
        # Each row's uniforms for every step, drawn up front from its own generator: on a CPU
        # generator torch.rand(k) gives exactly the values of k calls of torch.rand(1) (tested), so
        # the samples are the dynamic loop's.
        uniforms = _row_uniforms(generators, max_new).to(device) if temperature > 0 else None
        eos = torch.tensor(sorted(self.eos_token_ids), dtype=torch.long, device=device)
        eos_np = eos.cpu().numpy()
        toks_buf = torch.zeros((n, max_new), dtype=torch.long, device=device)
        lps_buf = torch.zeros((n, max_new), dtype=torch.float32, device=device)
        done = torch.zeros(n, dtype=torch.bool, device=device)
        pad = torch.full((n,), self.pad_token_id, dtype=torch.long, device=device)
        gen_ids: list[list[int]] = [[] for _ in range(n)]
        gen_lps: list[list[float]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        candidates = self._stop_candidates(stop) if stop else None
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
                if step + 1 == max_new or step + 1 - synced >= self.sync_every:
                    stopped = self._read_steps(
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
                    logits = step_fn(step_ids, lengths, width)
                else:
                    logits = self._last_logits(
                        input_ids=step_ids[:, None], attention_mask=mask[:, : width + 1],
                        position_ids=lengths[:, None].clone(), past_key_values=cache,
                    )
                width += 1
                lengths += live.long()
                self.stats["decode_steps"] += 1
                self.stats["decode_positions"] += n
        finally:
            if step_fn is not None:
                step_fn.release()
        _sync(mask)
        self.stats["decode_seconds"] += time.perf_counter() - t0
        self.stats["decode_tokens"] += sum(len(g) - 1 for g in gen_ids)
        for b in range(n):
            self._keep(prompts[b], gen_ids[b], cache, mask, b, width)
        return gen_ids, gen_lps, finish

    def _read_steps(
        self,
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
                j = _first_stop(self.decode, tail + row[:checked], len(tail), stop, window, candidates)
                if j is not None:
                    end, reason = j - len(tail) + 1, "stop"
                    stopped.append((r, base + j - len(tail)))
            if reason is None and base + end >= max_new:
                reason = "length"
            gen_ids[r].extend(row[:end])
            gen_lps[r].extend(lps_np[r, :end].tolist())
            finish[r] = reason
        return stopped

    def _fixed_shapes_ok(self) -> bool:
        """Whether the fixed-shape step may replace transformers' mask building (full attention only)."""
        cfg = self.model.config
        text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        layer_types = getattr(text_cfg, "layer_types", None) or []
        sliding = getattr(text_cfg, "use_sliding_window", False) or any(t != "full_attention" for t in layer_types)
        return not sliding

    def _stop_candidates(self, stop: tuple[str, ...]) -> np.ndarray | None:
        """Per token id, whether its arrival can complete a stop string; None if every token must be checked.

        A token is a candidate if its text in context (after a one-letter anchor token) contains the
        last character of a stop string or a replacement character (an incomplete UTF-8 sequence,
        which the next token may complete), if that text differs from the token decoded alone
        (context-dependent decoding, such as a leading space a SentencePiece decoder strips), or if
        the tokenizer cannot decode it. A non-candidate ``t`` then satisfies
        ``decode(ids + [t]) == decode(ids) + piece(t)`` with no stop string ending inside ``piece(t)``,
        so a stop string that is absent before ``t`` is absent after it. Stop strings that contain a
        replacement character themselves can appear when the check window slides, so they turn the
        filter off. Computed once per (tokenizer, stop set).
        """
        if any("\ufffd" in s for s in stop):
            return None
        key = (id(self.tokenizer), stop)
        if key in self._stop_candidate_sets:
            return self._stop_candidate_sets[key]
        pieces = self._token_pieces()
        if pieces is None:
            cand = None
        else:
            last = {s[-1] for s in stop}
            cand = np.fromiter(
                (p is None or "\ufffd" in p or any(c in p for c in last) for p in pieces), dtype=bool, count=len(pieces)
            )
        if len(self._stop_candidate_sets) >= 32:
            self._stop_candidate_sets.clear()
        self._stop_candidate_sets[key] = cand
        return cand

    def _token_pieces(self) -> list[str | None] | None:
        """Each token's text after a one-letter anchor token (None where it differs from its text alone).

        None overall if no single token decodes to one of the anchor letters.
        """
        if self._pieces is not None and self._pieces[0] == id(self.tokenizer):
            return self._pieces[1]
        anchor = None
        for ch in ("a", "x", "0"):
            enc = self.encode(ch)
            if len(enc) == 1 and self.decode(enc) == ch:
                anchor = enc[0]
                break
        if anchor is None:
            return None
        vocab = int(self.model.get_input_embeddings().num_embeddings)
        known = min(vocab, len(self.tokenizer))
        kwargs = {"skip_special_tokens": True, "clean_up_tokenization_spaces": False}
        alone = self.tokenizer.batch_decode([[i] for i in range(known)], **kwargs)
        paired = self.tokenizer.batch_decode([[anchor, i] for i in range(known)], **kwargs)
        prefix = self.decode([anchor])
        pieces: list[str | None] = [
            p[len(prefix) :] if p.startswith(prefix) and p[len(prefix) :] == a else None
            for p, a in zip(paired, alone, strict=True)
        ]
        pieces.extend([None] * (vocab - known))  # ids the tokenizer does not know: always checked
        self._pieces = (id(self.tokenizer), pieces)
        return pieces


class _DecodeStep:
    """The fixed-shape step over one bucket's buffers, kept across calls: ``(tokens, positions, column) -> logits``.

    Every call has the same shapes: the cache layers write at a position held in a tensor and
    attention runs over the whole buffer under a ``[rows, 1, 1, capacity]`` boolean mask, built
    here (transformers passes a 4-D mask through unchanged). The buffers are the bucket's
    (``rows`` and ``capacity`` rounded up, see :mod:`agents.policies.hf.graphs`): a call with fewer
    rows fills the first ones; the others attend to one column and their logits are never read.
    Where a capture is available (a ``torch.cuda.CUDAGraph`` on CUDA, or the policy's
    ``graph_capture``) the step is captured on its first call and replayed ever after, by this call
    and by every later call of the same bucket, with inputs copied into its static tensors; if the
    capture fails the step runs eagerly. The logits a replay returns live in the graph's output
    buffer and are overwritten by the next replay, which the static loop only calls after sampling
    from them.
    """

    def __init__(
        self, policy: DecodeLoops, rows: int, capacity: int, shapes: list[tuple[int, int]],
        dtype: torch.dtype, device: torch.device,
    ) -> None:
        import torch

        from agents.policies.hf.kv_cache import _buffer_cache

        self.policy, self.rows, self.capacity = policy, rows, capacity
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
        self.ids[n:] = self.policy.pad_token_id
        self.pos[n:] = 0
        return self.cache, self.mask[:n]

    def __call__(self, ids: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
        n = len(ids)
        self.ids[:n].copy_(ids[:, None])
        self.pos[:n].copy_(lengths[:, None])
        self.mask4[:, 0, 0].copy_(self.mask)
        self.col.fill_(width)
        stats = self.policy.stats
        if self.graph is None and not self.capture_failed:
            self._capture()
        if self.graph is None:
            stats["fixed_eager_steps"] += 1
            return self._forward()[:n]
        self.graph.replay()
        stats["graph_replays"] += 1
        return self.graph.out[:n]

    def _forward(self) -> torch.Tensor:
        return self.policy._last_logits(
            input_ids=self.ids, attention_mask=self.mask4, position_ids=self.pos, past_key_values=self.cache
        )

    def _capture(self) -> None:
        import warnings

        from agents.policies.hf.graphs import capture_cuda

        device = self.mask.device
        capture = self.policy.graph_capture or (capture_cuda if device.type == "cuda" else None)
        if capture is None:
            self.capture_failed = True  # nothing can capture here: eager steps
            return
        model = self.policy._generation_model()
        reads = [*model.parameters(), *model.buffers(), self.ids, self.pos, self.mask4, self.col]
        reads += [t for layer in self.cache.layers for t in (layer.kbuf, layer.vbuf)]
        try:
            self.graph = capture(self._forward, reads, device)
        except RuntimeError as err:  # something in the forward pass syncs with the host
            warnings.warn(f"graph capture of the decode step failed ({err}); running it eagerly", stacklevel=4)
            self.capture_failed = True
            self.policy.stats["graph_fallbacks"] += 1
            return
        self.policy.stats["graph_captures"] += 1

    def release(self) -> None:
        """Return the cache layers to their growing mode (the buffers and the graph stay for the next call)."""
        for layer in self.cache.layers:
            layer.write_at = None
