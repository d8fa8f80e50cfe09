"""A tiny randomly initialised Llama model and a byte-level BPE tokenizer, built in code (no downloads).

Shared by the policy, rollout and trainer tests::

    from tests.tiny_model import build_tiny_model, tiny_policy

    model, tokenizer = build_tiny_model(seed=0)
    policy = tiny_policy(seed=0)          # an agents.policies.hf.HFPolicy around them

The tokenizer is byte-level, so ``decode(encode(s)) == s`` for any string; it has the ChatML special
tokens (``<|im_start|>``, ``<|im_end|>`` as EOS, ``<|endoftext|>`` as padding) and a ChatML chat template,
like SmolLM2. Weights are drawn from an explicit ``torch.Generator`` (no global seeding) with a large
enough scale that greedy decoding has clear margins (so batched and one-at-a-time greedy decoding agree).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: A chat template with tool support in the Hermes/Qwen2.5 layout (written for the tests): an
#: assistant message renders its content and then each call as ``<tool_call>\n{"name": ..,
#: "arguments": ..}\n</tool_call>``; consecutive ``tool`` messages become one ``user`` turn of
#: ``<tool_response>`` blocks; ``tools=`` is declared in the system turn as Qwen2.5 does.
TOOLS_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}"
    "{{- '# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}"
    "{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\n<tool_call>\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# Text the tokenizer's merges are learned from: protocol tags and words of the test world.
_TRAINING_TEXTS = [
    "<think> I need to find who directed the film first. </think>",
    "<search> who directed The Glass Orchard </search>",
    "<search> where was Velora Quenn born </search>",
    "<answer> Essaly </answer>",
    "<answer> Karsk </answer>",
    "<information>Doc 1(Title: Drathmoor) Drathmoor is a harbour city in the country of Essaly.</information>",
    "<information>Doc 2(Title: Karsk) Karsk is a mountain town in the country of Vuldoria.</information>",
    "Answer the question. Reason step by step inside <think> and </think>. Question: In which country",
    "Invalid turn (no_action): No action found. Search with <search> query </search> or answer.",
]


@lru_cache(maxsize=4)
def _tokenizer_json(vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_TRAINING_TEXTS * 3, trainer)
    return str(tok.to_str())


def build_tiny_tokenizer(vocab_size: int = 400) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` with ChatML special tokens and chat template.

    Args:
        vocab_size: Upper bound on the vocabulary (bytes + learned merges + 3 special tokens).

    Returns:
        The tokenizer (EOS ``<|im_end|>``, padding ``<|endoftext|>``).
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json(vocab_size)),
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    seed: int = 0,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    init_std: float = 0.3,
    vocab_size: int = 400,
    tie_word_embeddings: bool = False,
) -> tuple[Any, Any]:
    """A tiny random ``LlamaForCausalLM`` and its tokenizer.

    Args:
        seed: Seeds the explicit generator the weights are drawn from (same seed, same model).
        hidden_size: Model width.
        num_layers: Decoder layers.
        num_heads: Attention heads.
        num_kv_heads: Key/value heads (grouped-query attention when fewer than ``num_heads``).
        init_std: Standard deviation of the weights; large enough for peaked next-token distributions.
        vocab_size: Tokenizer vocabulary bound.
        tie_word_embeddings: Share the output head's weight with the input embedding (as SmolLM2 does).

    Returns:
        ``(model, tokenizer)``; the model is float32, in eval mode, on the CPU.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tiny_tokenizer(vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, init_std, generator=gen)
    model.eval()
    return model, tokenizer


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread inside the block (restored afterwards).

    Tiny models gain nothing from threads, and on a busy machine torch's spinning worker threads
    make each forward pass 10-100x slower; use it in a module-scoped fixture::

        @pytest.fixture(autouse=True, scope="module")
        def _one_thread():
            with one_thread():
                yield
    """
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def tiny_policy(seed: int = 0, **kwargs: Any) -> Any:
    """An :class:`agents.policies.hf.HFPolicy` around :func:`build_tiny_model`.

    Args:
        seed: Model seed.
        **kwargs: Passed to ``HFPolicy`` (``dtype``, ``max_batch_size``, ...).
    """
    from agents.policies.hf import HFPolicy

    model, tokenizer = build_tiny_model(seed)
    return HFPolicy(model, tokenizer, **kwargs)


def tiny_model_folder(folder: Path, seed: int = 0) -> Path:
    """:func:`build_tiny_model` saved as an HF model folder (model and tokenizer), for what loads a model by path."""
    model, tokenizer = build_tiny_model(seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
