"""The one prompt preparation every policy does first: check sampling, encode each prompt, seed each prompt."""

from __future__ import annotations

from typing import Any

import pytest

from agents.policies.base import prepare_prompts, request_seeds


def test_prepare_prompts_checks_encodes_and_seeds_every_prompt() -> None:
    def encode(text: str) -> list[int]:
        return [ord(c) for c in text]

    kw: dict[str, Any] = {"stop": ["x"], "max_new_tokens": 4, "temperature": 1.0, "top_p": 1.0, "encode": encode}
    ids, seeds = prepare_prompts(["ab", (3, 4)], seed=7, seeds=request_seeds, **kw)
    assert ids == [[97, 98], [3, 4]] and seeds == request_seeds(7, 2)
    assert prepare_prompts([], seed=None, seeds=request_seeds, **kw) == ([], [])
    with pytest.raises(TypeError, match="not one string"):
        prepare_prompts("ab", seed=None, seeds=request_seeds, **kw)
    with pytest.raises(ValueError, match="temperature"):
        prepare_prompts(["ab"], seed=None, seeds=request_seeds, **kw | {"temperature": -1.0})
    with pytest.raises(ValueError, match="2 entries for 1 prompts"):
        prepare_prompts(["ab"], seed=[1, 2], seeds=request_seeds, **kw)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        prepare_prompts(["ab", []], seed=None, seeds=request_seeds, vocab_size=100, **kw)
    with pytest.raises(ValueError, match=r"prompt 0 has token ids outside \[0, 50\)"):
        prepare_prompts(["ab"], seed=None, seeds=request_seeds, vocab_size=50, **kw)
