"""The policy interface: batched generation, plus per-token log-probs for trainable policies."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from searchenv.errors import GenerationError as GenerationError  # defined with every error

#: A per-prompt seed in a backend's form (an int for a request, a generator for a model in process).
S = TypeVar("S")


@dataclass(frozen=True)
class Generation:
    """One sampled completion.

    Attributes:
        text: The decoded completion, up to and including the stop string that ended it.
        token_ids: The generated token ids exactly as sampled (cut after the stop string).
        logprobs: Log-probability of each generated token under the temperature-scaled model
            distribution (before top-p truncation), or None if the backend does not report them.
        finish_reason: ``"stop"`` (a stop string), ``"eos"`` (end-of-sequence token) or ``"length"``.
        n_tokens: Tokens generated as the backend counted them, when ``token_ids`` are not the
            sampled ids (a served model: ``token_ids`` are then the text re-encoded, or empty);
            None when ``token_ids`` are exact.
        tool_calls: The server returned the turn as structured ``tool_calls`` (a chat API asked
            with ``tools``; ``text`` is then their rendering as the ``tools`` protocol's text).
    """

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    finish_reason: str
    n_tokens: int | None = None
    tool_calls: bool = False

    @property
    def num_tokens(self) -> int:
        """Tokens generated: ``n_tokens`` when the backend reported it, else ``len(token_ids)``."""
        return self.n_tokens if self.n_tokens is not None else len(self.token_ids)


@runtime_checkable
class Policy(Protocol):
    """Anything that continues a batch of prompts.

    Prompts are token-id sequences (what rollouts use: no retokenization) or strings.
    """

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
        """Generate one completion per prompt, in one batch.

        Args:
            prompts: Token-id sequences or strings.
            stop: Generation of a sequence ends after any of these strings appears.
            max_new_tokens: Cap on generated tokens per sequence.
            temperature: 0 means greedy decoding.
            top_p: Nucleus sampling threshold.
            seed: Makes sampling reproducible: one int for the batch, or one int per prompt (then
                a prompt's sample does not depend on the rest of the batch); None for fresh entropy.

        Returns:
            One :class:`Generation` per prompt, in order.
        """
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids``."""
        ...

    def chat_prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of a chat (system/user) with the model's chat template and generation prompt."""
        ...


class TrainablePolicy(Policy, Protocol):
    """A policy whose parameters can be trained (a torch model underneath)."""

    model: Any
    tokenizer: Any

    def token_logprobs(
        self, sequences: Sequence[Sequence[int]], starts: Sequence[int], *, temperature: float = 1.0
    ) -> list[Any]:
        """Per-token log-probs (with gradient) of each sequence's tokens from ``starts[i]`` on.

        Args:
            sequences: Full token-id sequences (prompt + completion).
            starts: Index of the first token to score in each sequence (at least 1).
            temperature: Logits are divided by it, as when sampling (0 means 1), so the result
                matches the ``logprobs`` that ``generate`` reported at that temperature.

        Returns:
            One 1-D tensor per sequence, of length ``len(seq) - start``.
        """
        ...


@runtime_checkable
class ChatPolicy(Protocol):
    """A model reached only through chat messages (a chat-completions API): no token ids.

    Agents give it the conversation as messages (``system``, ``user``, then ``assistant`` turns
    and the environment's replies as ``user`` messages; under ``tools``, calls and ``tool``
    messages) instead of a token-id context.
    """

    def generate_chat(
        self,
        conversations: Sequence[Sequence[Mapping[str, Any]]],
        *,
        stop: Sequence[str] = (),
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Generation]:
        """Generate the next assistant message of every conversation (arguments as :meth:`Policy.generate`).

        ``tools`` (OpenAI function definitions) asks for native tool calls: the conversations then
        hold ``tool_calls`` and ``tool`` messages, and a reply's calls come back as the ``tools``
        protocol's text.
        """
        ...


def check_sampling(prompts: Sequence[Any], stop: Sequence[str], max_new_tokens: int, temperature: float,
                   top_p: float) -> None:
    """Validate the arguments every ``generate`` takes.

    Raises:
        TypeError: If ``prompts`` or ``stop`` is one string instead of a sequence.
        ValueError: For an empty stop string, or a value out of range.
    """
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of prompts, not one string")
    if isinstance(stop, str):
        raise TypeError("stop must be a sequence of strings, not one string")
    if any(not isinstance(s, str) or not s for s in stop):
        raise ValueError(f"stop strings must be non-empty strings, got {list(stop)!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if not isinstance(temperature, int | float) or not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if not isinstance(top_p, int | float) or not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def request_seeds(seed: int | Sequence[int] | None, n: int) -> list[int | None]:
    """One 32-bit seed per prompt for a backend that takes a seed per request.

    Args:
        seed: None (fresh entropy: no seed sent), one int for the batch (spread over the prompts),
            or one int per prompt.
        n: Number of prompts.

    Raises:
        TypeError: If ``seed`` is none of those.
        ValueError: If a per-prompt list has the wrong length.
    """
    import numpy as np

    if seed is None:
        return [None] * n
    if isinstance(seed, int) and not isinstance(seed, bool):
        return [int(np.random.SeedSequence(seed, spawn_key=(i,)).generate_state(1)[0]) for i in range(n)]
    if not isinstance(seed, Sequence):
        raise TypeError(f"seed must be None, an int or a sequence of ints, got {type(seed).__name__}")
    if len(seed) != n:
        raise ValueError(f"seed has {len(seed)} entries for {n} prompts")
    return [int(np.random.SeedSequence(int(s) % (1 << 128)).generate_state(1)[0]) for s in seed]


def prepare_prompts(
    prompts: Sequence[Sequence[int]] | Sequence[str],
    *,
    stop: Sequence[str],
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    seed: int | Sequence[int] | None,
    encode: Callable[[str], list[int]],
    seeds: Callable[[int | Sequence[int] | None, int], list[S]],
    vocab_size: int | None = None,
) -> tuple[list[list[int]], list[S]]:
    """What every ``generate`` does first: check the sampling arguments, encode each prompt, seed each prompt.

    Args:
        prompts: Token-id sequences, or strings (encoded with ``encode``).
        stop: As for :meth:`Policy.generate` (checked by :func:`check_sampling`).
        max_new_tokens: As for :meth:`Policy.generate`.
        temperature: As for :meth:`Policy.generate`.
        top_p: As for :meth:`Policy.generate`.
        seed: As for :meth:`Policy.generate`.
        encode: Text -> token ids, no special tokens added (the policy's ``encode``).
        seeds: ``(seed, number of prompts)`` -> one seed per prompt in the backend's form:
            :func:`request_seeds` for a backend that takes a seed per request, a generator per row
            for a model in process.
        vocab_size: For a model in process: every prompt must then be non-empty and its ids in
            ``[0, vocab_size)``.

    Returns:
        The prompts as lists of token ids, and their seeds.

    Raises:
        TypeError: As :func:`check_sampling`, or for a ``seed`` of the wrong type.
        ValueError: As :func:`check_sampling`, for per-prompt seeds of the wrong length, or an empty
            prompt or an id outside the vocabulary (with ``vocab_size``).
    """
    check_sampling(prompts, stop, max_new_tokens, temperature, top_p)
    ids: list[list[int]] = []
    for i, p in enumerate(prompts):
        row = encode(p) if isinstance(p, str) else [int(t) for t in p]  # type: ignore[call-overload]
        if vocab_size is not None:
            if not row:
                raise ValueError(f"prompt {i} is empty")
            if min(row) < 0 or max(row) >= vocab_size:
                raise ValueError(f"prompt {i} has token ids outside [0, {vocab_size})")
        ids.append(row)
    return ids, seeds(seed, len(ids))


def chat_template_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Token ids of a chat with ``tokenizer``'s chat template and the assistant generation prompt.

    Raises:
        ValueError: If the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; build prompts with encode() instead")
    out = tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True, tokenize=True)
    if isinstance(out, Mapping) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    return [int(t) for t in out]
