"""The question of a TRL dataset row's prompt, shared by the ``rollout_func`` and ``environment_factory`` paths."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _question(prompt: Any, position: int) -> str:
    """The question a dataset prompt carries: the prompt text, or the last user message's content."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(prompt):
            if isinstance(message, Mapping) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, Sequence):  # typed content blocks
                    texts = [c.get("text") for c in content if isinstance(c, Mapping) and c.get("type") == "text"]
                    if texts and all(isinstance(t, str) for t in texts):
                        return "".join(str(t) for t in texts)
    raise ValueError(f"prompt {position}: expected the question as text or a user message, got {str(prompt)[:120]}")
