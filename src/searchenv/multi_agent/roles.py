"""The roles of the multi-agent RAG episode: their prompts, how their outputs are read, and their penalties.

Three roles share one episode (MMOA-RAG, Chen et al., 2025): the **rewriter** turns the question
into sub-queries (one per line), the **selector** keeps candidate documents by their ids
(``Document0,Document3``), the **generator** answers from the kept documents. Each reader here is a
pure function of the role's own output text; none of them raises on any string (they are fed model
output), and what was malformed is returned as named problems that :data:`DEFAULT_PENALTIES` prices.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from searchenv.metrics import normalize_answer
from searchenv.protocols import sanitize
from searchenv.retrievers.base import Hit

#: Every role, in the order they act. An episode uses these or a subsequence holding ``generator``.
ROLES: tuple[str, ...] = ("rewriter", "selector", "generator")

#: The role prompts (each role's system message).
ROLE_PROMPTS: Mapping[str, str] = {
    "rewriter": (
        "You are the query rewriter of a question-answering system that searches a corpus. Rewrite the "
        "question into short search queries (sub-questions), one per line and nothing else, at most {max_queries}. "
        "A simple question needs one query; a question that chains facts needs one query per fact."
    ),
    "selector": (
        "You are the document selector of a question-answering system. Given the question and candidate "
        "documents, output the IDs of the documents that help answer the question, in the format "
        "Document0,Document3 and nothing else; output None if none helps."
    ),
    "generator": (
        "You are the answer generator of a question-answering system. Answer the question from the given "
        "documents with a short answer (a name, place, year or a few words) and nothing else."
    ),
}

#: The penalty of each problem each role's output can have (the paper's -0.5 per problem).
DEFAULT_PENALTIES: Mapping[str, Mapping[str, float]] = {
    "rewriter": {"too_many_queries": -0.5, "no_queries": -0.5, "overlong": -0.5},
    "selector": {"format": -0.5, "unknown_ids": -0.5, "duplicate_ids": -0.5, "overlong": -0.5},
    "generator": {"long_answer": -0.5, "overlong": -0.5},
}

MAX_QUERY_CHARS = 512  # a longer sub-query is cut to this (as the tag protocols bound a query)
MAX_TITLE_CHARS = 200
_MARKER = re.compile(r"^\s*(?:(?:sub-?)?(?:question|query)\s*\d*\s*[:.)]|\d{1,3}\s*[.):]|[-*\u2022])\s*", re.I)
_ID = re.compile(r"\d+")
_STRICT_IDS = re.compile(r"\s*Document\d+(?:\s*,\s*Document\d+)*\s*")
_NONE = re.compile(r"\s*none\.?\s*", re.I)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_ANSWER_LEAD = re.compile(r"^\s*(?:the\s+)?answer(?:\s+is)?\s*:\s*", re.I)


def parse_sub_queries(text: str) -> list[str]:
    """The rewriter's sub-queries: one per non-empty line, list markers (``1.``, ``-``, ``Query 2:``) removed.

    Whitespace is collapsed and each query is cut to :data:`MAX_QUERY_CHARS` characters.

    Args:
        text: The rewriter's output.

    Returns:
        The sub-queries in order (possibly none).
    """
    out = []
    for line in text.splitlines():
        query = " ".join(_MARKER.sub("", line, count=1).split())[:MAX_QUERY_CHARS].strip()
        if query:
            out.append(query)
    return out


@dataclass(frozen=True)
class Selection:
    """What the selector's output says.

    Attributes:
        ids: Candidate ids kept, in the order first named, each once.
        problems: Named problems: ``format`` (not ``Document<i>,Document<j>...``, empty or ``None``),
            ``unknown_ids`` (a named id is not a candidate's), ``duplicate_ids`` (an id named twice).
    """

    ids: tuple[int, ...]
    problems: tuple[str, ...]


def parse_selection(text: str, num_candidates: int) -> Selection:
    """Read the selector's output against ``num_candidates`` candidates (ids ``0 .. num_candidates - 1``).

    Every run of digits is an id (as MMOA-RAG reads ``Document3`` or ``3``); ids are compared as
    written, so ``03`` or a number past the last candidate is unknown. Empty output or ``None``
    keeps nothing and is well formed.

    Args:
        text: The selector's output.
        num_candidates: How many candidates were shown.

    Returns:
        The kept ids and the problems found.
    """
    valid = {str(i): i for i in range(max(0, num_candidates))}
    named = _ID.findall(text)
    problems = []
    if not (not text.strip() or _NONE.fullmatch(text) or _STRICT_IDS.fullmatch(text)):
        problems.append("format")
    if any(t not in valid for t in named):
        problems.append("unknown_ids")
    if len(set(named)) != len(named):
        problems.append("duplicate_ids")
    ids = tuple(dict.fromkeys(valid[t] for t in named if t in valid))
    return Selection(ids, tuple(problems))


def parse_answer(text: str) -> str | None:
    """The generator's answer: the first ``<answer>..</answer>`` block if there is one, else the whole output.

    A leading ``Answer:`` is dropped and whitespace collapsed, as the environment's protocols
    collapse an ``<answer>`` block.

    Args:
        text: The generator's output.

    Returns:
        The answer, or None when nothing is left (scored as no answer, as SearchQA-v0 scores an empty one).
    """
    m = _ANSWER_TAG.search(text)
    body = _ANSWER_LEAD.sub("", m.group(1) if m else text, count=1)
    answer = " ".join(body.split())
    return answer or None


def answer_words(answer: str) -> int:
    """Words of an answer after normalisation (what the ``long_answer`` penalty counts)."""
    return len(normalize_answer(answer).split())


def render_documents(hits: Sequence[tuple[int, Hit]], max_doc_chars: int) -> str:
    """Numbered documents as a role reads them: ``Document3 (Title: T): text``, blank-line separated.

    Titles and texts are cut to their bounds and protocol tags in them neutralised
    (:func:`searchenv.protocols.sanitize`), so a document can never look like a role's output.
    """
    return "\n\n".join(
        f"Document{i} (Title: {sanitize(h.title[:MAX_TITLE_CHARS])}): {sanitize(h.text[:max_doc_chars])}"
        for i, h in hits
    )


def document_chars(max_doc_chars: int, num_candidates: int) -> int:
    """An upper bound on :func:`render_documents` of ``num_candidates`` documents."""
    return num_candidates * (max_doc_chars + MAX_TITLE_CHARS + 32)


def role_content(role: str, question: str, documents: Sequence[tuple[int, Hit]] | None, max_doc_chars: int) -> str:
    """A role's user message: the question, and for the selector and generator the documents it reads.

    Args:
        role: One of :data:`ROLES`.
        question: The question.
        documents: ``(id, hit)`` pairs the role reads (None: not retrieved yet).
        max_doc_chars: Document text is cut to this.
    """
    parts = [f"Question: {question}"]
    if role == "rewriter":
        return parts[0]
    if documents is None:
        parts.append("(the documents are not retrieved yet)")
    elif documents:
        parts.append(render_documents(documents, max_doc_chars))
    else:
        parts.append("(no documents)")
    if role == "selector":
        last = f"Document{documents[-1][0]}" if documents else "none"
        parts.append(f"Now output the IDs of the documents that help answer the question (Document0 to {last}).")
    else:
        parts.append("Now answer the question." if documents else "No documents are given; answer the question.")
    return "\n\n".join(parts)
