r"""The chat template's text between two generated turns, for protocols that speak native tool calls.

Under a tag protocol (``search-r1``, ...) a rollout appends the environment's ``new_text`` after a
turn. Under ``tools`` the environment's reply is a ``tool`` message, and what the model reads
between its turns is the chat template's markup: the end of its own message, the reply as the
template lays out a tool result (Qwen: ``<|im_start|>user\\n<tool_response>\\n..\\n</tool_response>
<|im_end|>``), and the next generation prompt. :func:`reply_text` takes that text from the template
itself, so the token-level paths (the rollout engine, the verl agent loop) keep each turn's
generated ids as generated and count the template's markup as environment text (loss mask 0),
and ``prompt + turns + replies`` is exactly the template's rendering of ``env.messages()`` when
the turns are written as the template writes calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: Renders a conversation with a chat template: ``render(messages, add_generation_prompt) -> str``.
Render = Callable[[list[dict[str, Any]], bool], str]

_SENTINEL = "\u2063searchenv-turn-end\u2063"  # text no template adds or strips


def template_renderer(tokenizer: Any) -> Render:
    """A :data:`Render` over a Hugging Face tokenizer's chat template.

    Raises:
        ValueError: If the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; the tools protocol needs one to lay out tool results")

    def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                 tokenize=False))

    return render


def chat_renderer(policy: Any) -> Render:
    """The chat template a policy's prompts are built with: its ``render_chat`` or its tokenizer's template.

    Raises:
        TypeError: If the policy has neither (a protocol of native tool calls needs the template).
    """
    render = getattr(policy, "render_chat", None)
    if callable(render):
        return render
    tokenizer = getattr(policy, "tokenizer", None)
    if tokenizer is None:
        raise TypeError("a protocol of native tool calls needs the policy's chat template: give the policy a "
                        "`tokenizer` with a chat template or a render_chat(messages, add_generation_prompt) method")
    return template_renderer(tokenizer)


def turn_end_text(render: Render, before: Sequence[Mapping[str, Any]]) -> str:
    """The text a template puts after an assistant message's content (ChatML: ``<|im_end|>`` and a newline).

    Args:
        render: The chat template.
        before: The conversation before the assistant message.
    """
    probe = render([dict(m) for m in before] + [{"role": "assistant", "content": _SENTINEL}], False)
    at = probe.rfind(_SENTINEL)
    if at < 0:
        raise ValueError("the chat template does not render an assistant message's content")
    return probe[at + len(_SENTINEL):]


def reply_text(render: Render, messages: Sequence[Mapping[str, Any]], turn: int, *, done: bool) -> tuple[str, str]:
    """The template's text after the generated turn ``messages[turn]``, in two parts.

    Args:
        render: The chat template.
        messages: The conversation after the step (``env.messages()``); ``messages[turn]`` is the
            turn's ``assistant`` message and the rest are the environment's reply messages.
        turn: Index of the turn's message.
        done: The episode ended: no generation prompt after the reply.

    Returns:
        ``(end, reply)``: the end of the assistant message (which a turn that stopped at EOS has
        already generated in part: :func:`reply_ids` drops that part), and the reply messages with
        the next generation prompt (empty when the step added no reply, e.g. after an answer).

    Raises:
        ValueError: If the template does not render the conversation as a prefix of its extension
            (its text could then not be split into turns).
    """
    before = [dict(m) for m in messages[:turn]]
    end = turn_end_text(render, before)
    if len(messages) <= turn + 1:
        return end, ""
    through = render(before + [dict(messages[turn])], False)
    whole = render([dict(m) for m in messages], not done)
    if not whole.startswith(through):
        raise ValueError("the chat template renders a conversation differently once a reply follows; "
                         "its markup between turns cannot be taken from it")
    return end, whole[len(through):]


def reply_ids(encode: Callable[[str], list[int]], generated: Sequence[int], end: str, reply: str) -> list[int]:
    """Token ids of ``end + reply`` after a turn's ``generated`` ids, less the part of ``end`` already generated.

    A turn that stopped at the end-of-turn token (``<|im_end|>``) has generated the first token of
    ``end``; one that stopped at a stop string (``</tool_call>``) has not.

    Args:
        encode: Text to token ids, no special tokens added (special tokens in the text are read).
        generated: The turn's ids as generated.
        end: :func:`reply_text`'s first part.
        reply: Its second part.
    """
    end_ids = encode(end) if end else []
    done = 0
    for j in range(min(len(end_ids), len(generated)), 0, -1):
        if list(generated[-j:]) == end_ids[:j]:
            done = j
            break
    return end_ids[done:] + (encode(reply) if reply else [])
