"""A model that copies any answer it is shown, and the checks that it never is shown one before its episode ends.

Shared by the checks of every served environment (OpenEnv, verifiers' ``openenv`` taskset and ``searchqa``,
MCP, the TRL tool env), each in its own virtual environment: plain Python, no imports beyond the standard
library and this package's data classes.

:func:`copied_answer` plays the cheat an RL run would learn if the server leaked: from everything the
client has received so far (JSON objects or text), latest first, it takes the first string found under a
key that names an answer (``gold_answers``, ``answers``, ``target``, ...) and answers it. :data:`SEALED`
holds the test questions with gold answers that no document, question or tool text contains, so
:func:`assert_no_gold` can look for them in whole messages.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from tests.conftest import EXAMPLES

#: What the copier answers when it has found nothing to copy.
NOTHING = "no idea"
_ANSWER_KEY = re.compile(r"gold|answer|target|truth|label|solution|expected", re.I)

#: The test questions with answers nothing else holds (searching, reading and the tools never show them).
SEALED = [dataclasses.replace(e, answers=(f"Zorvek Quillan {i}",)) for i, e in enumerate(EXAMPLES)]


def _parsed(payload: Any) -> Any:
    if isinstance(payload, (str, bytes)):
        try:
            return json.loads(payload)
        except ValueError:
            return payload
    return payload


def answer_like(payload: Any) -> list[str]:
    """Every string under an answer-named key of ``payload`` (JSON text, parsed JSON or text), in order."""
    found: list[str] = []

    def walk(value: Any, under_answer_key: bool) -> None:
        value = _parsed(value) if isinstance(value, str) and value[:1] in "{[" else value
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, under_answer_key or bool(_ANSWER_KEY.search(str(key))))
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, under_answer_key)
        elif isinstance(value, str) and under_answer_key and value.strip():
            found.append(value)

    walk(_parsed(payload), False)
    return found


def copied_answer(seen: Sequence[Any]) -> str:
    """The copier's answer: the first answer-like string of the latest message that has one, else :data:`NOTHING`."""
    for payload in reversed(seen):
        candidates = answer_like(payload)
        if candidates:
            return candidates[0]
    return NOTHING


def assert_no_gold(messages: Sequence[Any], golds: Iterable[str], where: str) -> None:
    """No gold answer appears in any of ``messages`` (each JSON-dumped if it is not text).

    Raises:
        AssertionError: Naming ``where``, the message's position and the answer found.
    """
    for i, message in enumerate(messages):
        text = message if isinstance(message, str) else json.dumps(message, default=str)
        for gold in golds:
            if gold.lower() in text.lower():
                raise AssertionError(f"{where}: message {i} shows the gold answer {gold!r} before the episode "
                                     f"ended: {text[:300]!r}")
