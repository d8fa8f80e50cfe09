"""The frozen layers' work done once: each sample's hidden state where the trained layers begin, kept.

With ``train_layers = N`` the embeddings and every layer below the last N are frozen, so what they
compute for a sample never changes. SFT sees each demonstration once an epoch; :class:`FrozenLayers`
runs the frozen part once per sample (the first time it is seen), keeps the hidden state that enters
the lowest trained layer, and from then on runs only the last N layers on it (passed to the decoder
as ``inputs_embeds`` with its layer list cut to those N). A step after the first epoch then costs N
layers forward and backward instead of all of them forward and N backward.

The results are the same as the whole model's: the kept state is exactly what the lower layers
hand on (the same positions, mask and weights); only the order of floating-point work differs.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

from agents.devices import autocast, model_device, to_device
from agents.trainers.models import decoder_layers, top_layer_indices
from agents.trainers.samples import ForwardOut, Padded, Sample, logprobs_from_hidden, pad_samples, split_model


class _Stop(Exception):
    """Raised by the hook on the lowest trained layer: the frozen part is done, the rest is not needed."""


class FrozenLayers:
    """Runs a model whose lower layers are frozen, keeping each sample's state at the first trained layer.

    Args:
        model: The causal LM (possibly peft-wrapped) whose layers below the last ``train_layers`` are frozen.
        train_layers: How many layers from the top train.
        max_bytes: Keep at most this many bytes of states (later samples are recomputed each time).

    Raises:
        ValueError: If the model has no decoder layer list or fewer layers than ``train_layers``.
    """

    def __init__(self, model: Any, train_layers: int, max_bytes: int = 8 << 30) -> None:
        self.model = model
        self.layers = decoder_layers(model)
        self.first = top_layer_indices(model, train_layers)[0]
        self.max_bytes = max_bytes
        self.states: dict[Hashable, torch.Tensor] = {}
        self.bytes = 0
        self.computed = 0
        self.reused = 0

    def _frozen_states(self, samples: Sequence[Sample], pad_id: int) -> list[torch.Tensor]:
        """Each sample's hidden state entering the first trained layer ``[len, H]`` (no gradient)."""
        decoder, _head = split_model(self.model)
        batch = pad_samples(samples, pad_id, model_device(self.model))
        caught: list[torch.Tensor] = []

        def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            caught.append(args[0] if args else kwargs["hidden_states"])
            raise _Stop

        handle = self.layers[self.first].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            with torch.no_grad():
                decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
        except _Stop:
            pass
        finally:
            handle.remove()
        if not caught:  # pragma: no cover - the decoder always reaches its layers
            raise RuntimeError("the decoder never reached its first trained layer")
        return [caught[0][i, : len(s.ids)].detach() for i, s in enumerate(samples)]

    def hidden(self, samples: Sequence[Sample], keys: Sequence[Hashable], pad_id: int) -> list[torch.Tensor]:
        """The states of ``samples`` (kept under ``keys``; the missing ones computed in one batch)."""
        missing = [i for i, k in enumerate(keys) if k not in self.states]
        fresh = dict(zip(missing, self._frozen_states([samples[i] for i in missing], pad_id), strict=True)) \
            if missing else {}
        out = []
        for i, key in enumerate(keys):
            if i in fresh:
                state = fresh[i]
                self.computed += 1
                size = state.numel() * state.element_size()
                if self.bytes + size <= self.max_bytes:
                    self.states[key] = state
                    self.bytes += size
            else:
                state = self.states[key]
                self.reused += 1
            out.append(state)
        return out

    def forward_logprobs(self, samples: Sequence[Sample], keys: Sequence[Hashable], batch: Padded, pad_id: int, *,
                         bf16: bool = False) -> ForwardOut:
        """:func:`~agents.trainers.samples.forward_logprobs` of ``samples``, the frozen layers' part reused.

        Args:
            samples: The micro-batch.
            keys: One hashable key per sample that names it across steps (its index in the data).
            batch: ``samples`` padded (:func:`~agents.trainers.samples.pad_samples`).
            pad_id: Padding token id.
            bf16: Run the trained layers under bfloat16 autocast.
        """
        device = model_device(self.model)
        states = self.hidden(samples, keys, pad_id)
        batch = to_device(batch, device)
        length = batch.input_ids.shape[1]
        embeds = torch.zeros(len(samples), length, states[0].shape[-1], dtype=states[0].dtype, device=device)
        for i, state in enumerate(states):
            embeds[i, : state.shape[0]] = state
        decoder, head = split_model(self.model)
        full = decoder.layers
        decoder.layers = torch.nn.ModuleList(list(full)[self.first :])
        try:
            with autocast(device, bf16):
                hidden = decoder(inputs_embeds=embeds, attention_mask=batch.attention_mask,
                                 use_cache=False).last_hidden_state
        finally:
            decoder.layers = full
        return logprobs_from_hidden(hidden, head, batch, bf16=bf16)
