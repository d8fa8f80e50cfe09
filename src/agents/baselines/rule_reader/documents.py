"""Candidate extraction of the rule-based reader: spans of the retrieved documents, scored and ranked.

See :mod:`agents.baselines.rule_reader` for the score.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from agents.baselines.rule_reader.question import (
    _ARTICLES,
    _BREAK_RE,
    _COPULA,
    _KIND_NOUNS,
    _ROLE_STOP,
    _ROLE_VERBS,
    _SENT_RE,
    _STEM,
    _STOPWORDS,
    ANSWER_TYPES,
    QuestionAnalysis,
    _find,
    _is_cap,
    _span_positions,
    analyse_question,
    tokenize,
)
from searchenv.metrics import normalize_answer
from searchenv.retrievers.base import Hit


@dataclass(frozen=True, slots=True)
class Candidate:
    """A ranked answer candidate.

    Attributes:
        text: The span as written in the document (or ``yes``/``no``, or a question option).
        score: The combined score (see the module docstring).
        support: Number of retrieved documents that mention it (comparisons: options resolved).
        proximity: Best ``1 / (1 + distance)`` to a relation keyword of the question.
        type_fit: How well it fits the question's answer type, in [0, 1].
        recent: Whether a document of the latest search mentions it.
        rank_score: ``1 / (1 + best rank)`` of a document mentioning it.
        is_number: Whether the span is a number.
        is_title: Whether the span is the title of a retrieved document.
        about: Whether a document about a question entity or a searched entity (titled with it)
            mentions it.
    """

    text: str
    score: float
    support: int
    proximity: float
    type_fit: float
    recent: bool
    rank_score: float
    is_number: bool
    is_title: bool
    about: bool = False


@dataclass(frozen=True)
class ExtractorWeights:
    """Weights of the candidate score (see the module docstring).

    Attributes:
        proximity: Relation-keyword proximity.
        type_fit: Fit to the question's answer type.
        support: The (capped) number of supporting documents.
        recent: Being mentioned by the latest search.
        rank: The best retrieval rank.
        number: The number / non-number answer cue.
        about: Being mentioned in a document about a question or searched entity.
    """

    proximity: float = 1.0
    type_fit: float = 1.0
    support: float = 0.3
    recent: float = 0.5
    rank: float = 0.3
    number: float = 1.0
    about: float = 1.0


# ---- documents ---------------------------------------------------------------------------------


_MAX_GRAM = 6


@dataclass(frozen=True)
class _Span:
    lo: int
    hi: int
    norm: str
    surface: str


@dataclass(frozen=True)
class _Sent:
    raw: tuple[str, ...]  # tokens without articles
    norm: tuple[str, ...]  # normalize_answer of each raw token
    stems: tuple[str, ...]
    spans: tuple[_Span, ...]  # capitalised n-grams / numbers (chunk breaks respected)
    roles: tuple[_Span, ...]  # "is a <role>" noun phrases
    kinds: tuple[_Span, ...]  # "<kind> company" modifiers


@dataclass(frozen=True)
class _Doc:
    title: str
    sents: tuple[_Sent, ...]
    grams: frozenset[str]  # every normalised n-gram (n <= _MAX_GRAM) within a sentence


def _is_role_word(token: str) -> bool:
    return token.isalpha() and token.islower() and token not in _ROLE_STOP and token not in _STOPWORDS


def _sentence(text: str, lower_vocab: frozenset[str]) -> _Sent:
    raw: list[str] = []
    spans: list[tuple[int, int]] = []
    for chunk in _BREAK_RE.split(text):
        toks = [t for t in tokenize(chunk) if t.lower() not in _ARTICLES or _is_cap(t)]
        # Capitalised articles open names ("The Glass Orchard") or sentences; positions skip them.
        offset = len(raw)
        spans.extend((offset + a, offset + b) for a, b in _span_positions(toks, lower_vocab))
        raw.extend(toks)
    norm = tuple(normalize_answer(t) for t in raw)
    role_spans: list[tuple[int, int]] = []
    lower_raw = [t.lower() for t in raw]
    # "is a <role>": articles were dropped from raw, so the role follows the verb directly;
    # "is a citizen of", "an alumnus of" name a relation, not a role.
    for i in range(len(lower_raw) - 1):
        if lower_raw[i] not in _ROLE_VERBS or not _is_role_word(raw[i + 1]):
            continue
        end = i + 2
        if end < len(raw) and _is_role_word(raw[end]):
            end += 1
        if end < len(raw) and lower_raw[end] == "of":
            continue
        role_spans.append((i + 1, end))
    kind_spans = [(i - 1, i) for i in range(1, len(raw)) if lower_raw[i] in _KIND_NOUNS and _is_role_word(raw[i - 1])]
    stems = tuple(t.lower()[:_STEM] for t in raw)

    def made(pairs: Iterable[tuple[int, int]]) -> tuple[_Span, ...]:
        return tuple(_Span(a, b, " ".join(t for t in norm[a:b] if t), " ".join(raw[a:b])) for a, b in pairs)

    return _Sent(tuple(raw), norm, stems, made(spans), made(role_spans), made(kind_spans))


@lru_cache(maxsize=65536)
def _analyse_doc(title: str, text: str) -> _Doc:
    lower_vocab = frozenset(t for t in tokenize(text) if t.islower())
    sents = [_sentence(s, lower_vocab) for s in _SENT_RE.split(text) if s.strip()]
    grams: set[str] = set()
    for sent in sents:
        toks = [t for t in sent.norm if t]
        for n in range(1, _MAX_GRAM + 1):
            grams.update(" ".join(toks[i : i + n]) for i in range(len(toks) - n + 1))
    return _Doc(title, tuple(sents), frozenset(grams))


def _contained(norm: str, texts: Iterable[str]) -> bool:
    padded = f" {norm} "
    return any(padded in f" {t} " for t in texts)


def _nearest(stems: Sequence[str], targets: frozenset[str], start: int, end: int) -> float:
    """``1 / (1 + d)`` for the nearest token in ``targets`` outside [start, end), else 0."""
    best = 0.0
    if not targets:
        return best
    for k, s in enumerate(stems):
        if start <= k < end or s not in targets:
            continue
        d = start - k if k < start else k - end + 1
        best = max(best, 1.0 / d if d > 0 else 1.0)
    return best


def _person_shaped(text: str) -> bool:
    words = text.split()
    cue_stems = set().union(*(t.name_words for t in ANSWER_TYPES.values()))
    return 2 <= len(words) <= 3 and all(_is_cap(w) for w in words) and not any(
        w.lower()[:_STEM] in cue_stems for w in words
    )


def _type_fit(answer_type: str, text: str, sent: _Sent, start: int, end: int) -> float:
    """1 for a clear sign of the type (own words, *city of X*, *X is a city*), else a little for nearby cues."""
    if answer_type == "person":
        return 1.0 if _person_shaped(text) else 0.0
    spec = ANSWER_TYPES.get(answer_type)
    if spec is None or not (spec.name_words or spec.before or spec.after or spec.near):
        return 0.0
    if any(w.lower()[:_STEM] in spec.name_words for w in text.split()):
        return 1.0
    low = [t.lower() for t in sent.raw]
    for cue, conn in spec.before:
        if conn:
            if start >= 2 and low[start - 1] == conn and sent.stems[start - 2] == cue:
                return 1.0
        elif start >= 1 and sent.stems[start - 1] == cue:
            return 1.0
    if end < len(low) and low[end] in _COPULA:
        k = end + 1
        while k < len(low) and low[k] in ("as", "also", "a", "an", "the"):
            k += 1
        if k < len(low) and sent.stems[k] in spec.after:
            return 1.0
    return 0.3 * _nearest(sent.stems, spec.near, start, end)


@dataclass
class _Acc:
    surface: str
    order: int
    docs: set[int]
    proximity: float = 0.0
    type_fit: float = 0.0
    recent: bool = False
    best_rank: int | None = None
    is_title: bool = False
    about: bool = False


def extract_candidates(
    question: str,
    hits: Sequence[Hit],
    *,
    recent_ids: Iterable[str] = (),
    exclude: Iterable[str] = (),
    weights: ExtractorWeights | None = None,
    limit: int | None = None,
    mode: str = "answer",
    hop: int = 0,
) -> list[Candidate]:
    """Rank answer candidates (or next-hop entities) found in the retrieved documents.

    Args:
        question: The question.
        hits: Every document retrieved so far, de-duplicated, in retrieval order (a hit's rank
            is its position in this list).
        recent_ids: Doc ids returned by the latest search.
        exclude: Strings whose spans are not answers (e.g. entities already searched for).
        weights: Score weights; defaults to :class:`ExtractorWeights`.
        limit: Keep at most this many candidates.
        mode: ``"answer"`` (rank answers; comparison questions are resolved) or ``"bridge"``
            (rank entities worth searching next: no numbers; proximity to the question's inner
            relation and fit to the type it implies on the first hop, any relation later).
        hop: Entities already followed up (bridge mode: 0 means the next search is the second hop).

    Returns:
        Candidates, best first (ties broken by first appearance).

    Raises:
        ValueError: For an unknown ``mode``.
    """
    if mode not in ("answer", "bridge"):
        raise ValueError(f"mode must be 'answer' or 'bridge', got {mode!r}")
    w = weights if weights is not None else ExtractorWeights()
    ranked = _extract(question, tuple(hits), frozenset(recent_ids), tuple(exclude), w, mode, hop)
    return list(ranked[:limit] if limit is not None else ranked)


@lru_cache(maxsize=32768)
def _extract(
    question: str,
    hits: tuple[Hit, ...],
    recent: frozenset[str],
    exclude: tuple[str, ...],
    w: ExtractorWeights,
    mode: str,
    hop: int,
) -> tuple[Candidate, ...]:
    # Cached: during training the same question meets the same documents again and again.
    qa = analyse_question(question)
    docs = [_analyse_doc(h.title, h.text) for h in hits]
    if mode == "answer" and qa.options:
        return tuple(_resolve_comparison(qa, hits, docs, set(recent), w))
    if mode == "answer":
        answer_type, relations = qa.answer_type, qa.relations
    elif hop == 0 and qa.inner:
        answer_type, relations = qa.bridge_type, qa.inner
    else:
        answer_type, relations = "other", qa.relations
    titles = {normalize_answer(h.title) for h in hits if h.title.strip()}
    acc: dict[str, _Acc] = {}
    excluded = list(exclude)
    banned = [normalize_answer(question)] + [normalize_answer(e) for e in excluded]
    banned = [b for b in banned if b]
    # The subject of the current hop: the entity searched for last, else the question's entities.
    subjects = {normalize_answer(e) for e in (excluded[-1:] or qa.entities)} - {""}
    about = [normalize_answer(h.title) in subjects for h in hits]

    def visit(norm: str, surface: str, di: int, sent: _Sent | None, start: int, end: int, typed: bool = False) -> None:
        if not norm or _contained(norm, banned):
            return
        if mode == "bridge" and norm.replace(" ", "").isdigit():
            return
        a = acc.get(norm)
        if a is None:
            a = acc[norm] = _Acc(surface, len(acc), set(), is_title=norm in titles)
        a.docs.add(di)
        if hits[di].doc_id in recent:
            a.recent = True
        a.best_rank = di if a.best_rank is None else min(a.best_rank, di)
        a.about = a.about or about[di]
        if typed:  # a role / kind phrase found by the pattern of the asked type
            a.type_fit = 1.0
        if sent is not None:
            a.proximity = max(a.proximity, _nearest(sent.stems, relations, start, end))
            a.type_fit = max(a.type_fit, _type_fit(answer_type, surface, sent, start, end))
        elif answer_type in ANSWER_TYPES or answer_type == "person":
            a.type_fit = max(a.type_fit, _type_fit(answer_type, surface, _Sent((), (), (), (), (), ()), 0, 0))

    for di, (h, d) in enumerate(zip(hits, docs, strict=True)):
        if h.title.strip():
            visit(normalize_answer(h.title), h.title.strip(), di, None, 0, 0)
        for sent in d.sents:
            for sp in sent.spans:
                visit(sp.norm, sp.surface, di, sent, sp.lo, sp.hi)
            typed = sent.roles if answer_type == "occupation" else sent.kinds if answer_type == "industry" else ()
            for sp in typed:
                visit(sp.norm, sp.surface, di, sent, sp.lo, sp.hi, typed=True)
    # Mentions of known candidates elsewhere (e.g. a title in another document's text).
    for norm, a in acc.items():
        for di, d in enumerate(docs):
            if di not in a.docs and norm in d.grams:
                a.docs.add(di)
                if hits[di].doc_id in recent:
                    a.recent = True

    wants_number = answer_type == "number"
    out: list[tuple[float, int, Candidate]] = []
    for norm, a in acc.items():
        is_number = norm.replace(" ", "").isdigit()
        number_match = 0.0 if mode == "bridge" else (1.0 if is_number == wants_number else -1.0)
        rank_score = 0.0 if a.best_rank is None else 1.0 / (1.0 + a.best_rank)
        type_fit = a.type_fit
        support = len(a.docs)
        score = (
            w.proximity * a.proximity
            + w.type_fit * type_fit
            + w.support * min(support, 3) / 3.0
            + w.recent * float(a.recent)
            + w.rank * rank_score
            + w.number * number_match
            + w.about * float(a.about)
        )
        cand = Candidate(
            a.surface, score, support, a.proximity, type_fit, a.recent, rank_score, is_number, a.is_title, a.about
        )
        out.append((score, a.order, cand))
    out.sort(key=lambda t: (-t[0], t[1]))
    return tuple(c for _, _, c in out)


def _option_value(
    qa: QuestionAnalysis, option: str, hits: Sequence[Hit], docs: Sequence[_Doc], w: ExtractorWeights
) -> tuple[str | None, bool]:
    """The compared value of one option and whether a document of the latest search gave it."""
    onorm = normalize_answer(option)
    other = [normalize_answer(o) for o in qa.options if normalize_answer(o) != onorm]
    about = [i for i, h in enumerate(hits) if normalize_answer(h.title) == onorm]
    if not about:
        about = [
            i for i, d in enumerate(docs)
            if any(_find([t for t in s.norm if t], onorm.split()) for s in d.sents)
        ]
    want = qa.compared_type or "other"
    best: tuple[float, str] | None = None
    for i in about:
        d = docs[i]
        titled = normalize_answer(hits[i].title) == onorm
        for s in d.sents:
            norm_seq = list(s.norm)
            opos = _find(norm_seq, onorm.split())
            if not titled and not opos:
                continue
            for sp in s.spans:
                a, b, surface, vnorm = sp.lo, sp.hi, sp.surface, sp.norm
                if not vnorm or vnorm == onorm or vnorm in other:
                    continue
                is_num = vnorm.isdigit()
                if (want == "number") != is_num:
                    continue
                score = w.proximity * _nearest(s.stems, qa.relations, a, b)
                if want in ANSWER_TYPES:
                    score += 2.0 * w.type_fit * _type_fit(want, surface, s, a, b)
                if opos:
                    score += 0.5 / (1.0 + min(abs(a - p) for p in opos))
                score += 0.5 * float(titled) - 0.01 * i
                if best is None or score > best[0]:
                    best = (score, vnorm)
    return (best[1] if best else None), False


def _resolve_comparison(
    qa: QuestionAnalysis, hits: Sequence[Hit], docs: Sequence[_Doc], recent: set[str], w: ExtractorWeights
) -> list[Candidate]:
    values = [_option_value(qa, o, hits, docs, w)[0] for o in qa.options]
    found = sum(v is not None for v in values)
    any_recent = any(h.doc_id in recent for h in hits)
    if qa.answer_type == "yesno":
        if found == 2:
            answer = "yes" if values[0] == values[1] else "no"
        else:
            answer = closed_book_guess_from(qa)
        texts = [answer, "no" if answer == "yes" else "yes"]
    else:
        if found == 2 and values[0] is not None and values[1] is not None and values[0] != values[1]:
            y0, y1 = int(values[0]), int(values[1])
            first = 0 if (y0 < y1) == (qa.choose == "min") else 1
        elif found == 1:
            # One year known: nothing to compare; keep the question order guess.
            first = 0
        else:
            first = 0
        texts = [qa.options[first], qa.options[1 - first]]
    conf = found / 2.0
    return [
        Candidate(texts[0], 1.0 + conf, found, conf, 1.0, any_recent, 1.0 if hits else 0.0, False, False),
        Candidate(texts[1], 1.0 - conf, found, 0.0, 1.0, any_recent, 0.0, False, False),
    ]


def closed_book_guess_from(qa: QuestionAnalysis) -> str:
    """The no-retrieval guess for an analysed question (see :func:`closed_book_guess`)."""
    if qa.answer_type == "yesno":
        return "no"
    if qa.options:
        return qa.options[0]
    return "unknown"


def closed_book_guess(question: str) -> str:
    """The guess without retrieval: ``no`` for "same ...?" questions, a comparison's first option, else ``unknown``."""
    return closed_book_guess_from(analyse_question(question))


