"""A vLLM policy: the :class:`~agents.policies.base.Policy` protocol on a vLLM engine (GPU).

vLLM is imported only when a :class:`VLLMPolicy` is built (install the ``vllm`` extra)::

    from agents.policies.vllm import VLLMPolicy

    policy = VLLMPolicy("SmolLM2-135M-Instruct", gpu_memory_utilization=0.3)
    batch = rollout(policy, examples, retriever, group_size=8)

Model names resolve as for :class:`~agents.policies.hf.HFPolicy` (the packaged SmolLM2 GGUF is
converted once to safetensors, which vLLM loads). Prompts are token ids (no retokenization);
each prompt gets its own ``SamplingParams`` seed, so samples are reproducible per prompt.

Differences from :class:`~agents.policies.hf.HFPolicy`:

- ``logprobs`` are what vLLM reports for the sampled tokens: by default (``logprobs_mode``
  ``"raw_logprobs"``) log-probs of the unscaled model distribution. Pass
  ``logprobs_mode="processed_logprobs"`` for the temperature-scaled (and top-p-truncated)
  distribution. Trainers should recompute log-probs with the training model anyway.
- ``finish_reason`` is ``"stop"`` for a stop string, ``"eos"`` for an end-of-sequence token and
  ``"length"`` at ``max_new_tokens``.
- There is no ``token_logprobs``: vLLM serves rollouts; train with the transformers model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from agents.policies.base import Generation, chat_template_ids, prepare_prompts, request_seeds


def vllm_available() -> str | None:
    """None when vLLM and a CUDA GPU are usable, else the reason they are not."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install 'searchenv[vllm]')"
    try:
        import torch
    except ImportError:  # pragma: no cover - vLLM depends on torch
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is available"
    return None


class VLLMPolicy:
    """Batched generation with vLLM.

    Args:
        model: A packaged model name, ``.gguf`` file or model folder (see
            :func:`agents.policies.hf.resolve_model_path`).
        dtype: vLLM dtype (``"auto"``, ``"bfloat16"``, ``"float16"``, ``"float32"``).
        seed: Engine seed.
        **engine_kwargs: More ``vllm.LLM`` arguments (``gpu_memory_utilization``,
            ``max_model_len``, ``logprobs_mode``, ...).

    Raises:
        RuntimeError: If vLLM or a GPU is not available (the message says which).
    """

    def __init__(self, model: str | os.PathLike[str] = "SmolLM2-135M-Instruct", *, dtype: str = "auto",
                 seed: int = 0, **engine_kwargs: Any) -> None:
        reason = vllm_available()
        if reason is not None:
            raise RuntimeError(f"VLLMPolicy needs vLLM on a GPU: {reason}")
        from vllm import LLM

        from agents.policies.hf import resolve_model_path

        path = resolve_model_path(model)
        self._attach(LLM(model=str(path), tokenizer=str(path), dtype=dtype, seed=seed, **engine_kwargs))

    @classmethod
    def from_engine(cls, llm: Any) -> VLLMPolicy:
        """A policy on an already running ``vllm.LLM`` (e.g. the one TRL colocates with training).

        Args:
            llm: The engine; its weights are whatever its owner last loaded into it.
        """
        policy = cls.__new__(cls)
        policy._attach(llm)
        return policy

    def _attach(self, llm: Any) -> None:
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        self.eos_token_ids = frozenset(
            t for t in (getattr(self.tokenizer, "eos_token_id", None),) if isinstance(t, int)
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids``, special tokens left out."""
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=True))

    def chat_prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Token ids of a chat with the chat template and the assistant generation prompt."""
        return chat_template_ids(self.tokenizer, messages)

    def _prepare(self, prompts: Sequence[Sequence[int]] | Sequence[str], stop: Sequence[str], max_new_tokens: int,
                 temperature: float, top_p: float, seed: int | Sequence[int] | None,
                 ) -> tuple[list[list[int]], list[int | None]]:
        """Checked sampling settings: the prompts as token ids, and one seed (or None) per prompt."""
        return prepare_prompts(prompts, stop=stop, max_new_tokens=max_new_tokens, temperature=temperature,
                               top_p=top_p, seed=seed, encode=self.encode, seeds=request_seeds)

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
        """Continue every prompt in one ``LLM.generate`` call (see :class:`~agents.policies.base.Policy`)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids, seeds = self._prepare(prompts, stop, max_new_tokens, temperature, top_p, seed)
        params = [
            SamplingParams(
                n=1,
                temperature=float(temperature),
                top_p=float(top_p) if temperature > 0 else 1.0,
                max_tokens=max_new_tokens,
                stop=list(stop) or None,
                include_stop_str_in_output=True,
                logprobs=0,
                seed=s,
            )
            for s in seeds
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=False)
        results = []
        for out in outputs:
            comp = out.outputs[0]
            token_ids = tuple(int(t) for t in comp.token_ids)
            logprobs = None
            if comp.logprobs is not None:
                logprobs = tuple(float(step[t].logprob) for step, t in zip(comp.logprobs, token_ids, strict=True))
            if comp.finish_reason == "length":
                reason = "length"
            elif isinstance(comp.stop_reason, str):
                reason = "stop"
            else:
                reason = "eos"
            results.append(Generation(comp.text, token_ids, logprobs, reason))
        return results


class VLLMServerPolicy(VLLMPolicy):
    """Generation through a vLLM server's completions endpoint, with TRL's ``VLLMClient``.

    This is TRL's ``vllm_mode="server"`` (``trl vllm-serve`` on its own GPUs): TRL syncs the
    trained weights to the server before each rollout, and this policy sends token-id prompts
    with the protocol's stop strings (``include_stop_str_in_output``) and asks for the sampled
    tokens' log-probs, so contexts stay token ids end to end.

    The server takes one seed per request, so a batch with per-prompt seeds is sent with one seed
    derived from all of them: runs repeat, but an episode's samples depend on which episodes share
    its batch (unlike :class:`VLLMPolicy` and :class:`~agents.policies.hf.HFPolicy`).

    Args:
        client: A ``trl.generation.vllm_client.VLLMClient`` (or anything with its ``generate``).
        tokenizer: The model's tokenizer (the trainer's ``processing_class``).
    """

    def __init__(self, client: Any, tokenizer: Any) -> None:
        self.llm = None
        self.client = client
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(
            t for t in (getattr(tokenizer, "eos_token_id", None),) if isinstance(t, int)
        )

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
        """Continue every prompt in one request (see :class:`~agents.policies.base.Policy`)."""
        ids, seeds = self._prepare(prompts, stop, max_new_tokens, temperature, top_p, seed)
        if not ids:
            return []
        extra: dict[str, Any] = {"stop": list(stop) or None, "include_stop_str_in_output": True}
        if any(s is not None for s in seeds):
            extra["seed"] = hash(tuple(seeds)) & 0x7FFFFFFF  # ints hash the same in every process
        out = self.client.generate(prompts=ids, n=1, temperature=float(temperature),
                                   top_p=float(top_p) if temperature > 0 else 1.0, max_tokens=max_new_tokens,
                                   logprobs=0, generation_kwargs=extra)
        completions = out["completion_ids"]
        if len(completions) != len(ids):
            raise RuntimeError(f"the vLLM server returned {len(completions)} completions for {len(ids)} prompts")
        per_seq = out.get("logprobs") or [None] * len(completions)
        results = []
        for comp, lps in zip(completions, per_seq, strict=True):
            token_ids = tuple(int(t) for t in comp)
            logprobs = None
            if lps is not None:
                logprobs = tuple(float("nan") if not step or step[0] is None else float(step[0]) for step in lps)
            text = self.decode(token_ids)
            results.append(Generation(text, token_ids, logprobs,
                                      finish_reason(text, token_ids, stop, self.eos_token_ids, max_new_tokens)))
        return results


def finish_reason(text: str, token_ids: Sequence[int], stop: Sequence[str], eos_token_ids: frozenset[int],
                  max_new_tokens: int) -> str:
    """Why a completion that came back without a finish reason ended: ``stop``, ``eos`` or ``length``.

    For engines reached through TRL (its vLLM client and its colocated generation), which return
    token ids only: a stop string in the text, else an end-of-sequence id last, else ``length``
    at the cap (and ``eos`` below it: vLLM stops early only at a stop or end of sequence).
    """
    if any(s in text for s in stop):
        return "stop"
    if token_ids and token_ids[-1] in eos_token_ids:
        return "eos"
    return "length" if len(token_ids) >= max_new_tokens else "eos"
