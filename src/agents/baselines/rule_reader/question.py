"""Question analysis of the rule-based reader: tokens, capitalised spans, answer type, comparisons, hops.

See :mod:`agents.baselines.rule_reader` for the rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from searchenv.metrics import normalize_answer

_TOKEN_RE = re.compile(r"\w+(?:['\u2019-]\w+)*")
# Punctuation that ends a name: sentence ends, commas, brackets, quotes, dashes between spaces.
_BREAK_RE = re.compile(r"[.,;:!?()\[\]{}\"\u201c\u201d]|\s[-\u2013\u2014]\s")
_SENT_RE = re.compile(r"(?<=[.!?])\s+")
_CONNECTORS = frozenset({"of", "de", "del", "da", "di", "van", "von", "la", "le", "du", "al", "der", "den", "the"})
_ARTICLES = frozenset({"a", "an", "the"})
_FUNCTION_WORDS = frozenset(
    """the a an in on at it he she they we i you this that these those his her its their there what who
    whom whose where when which why how after before during from by for with as is was are were one both either
    neither and or but if while since until also then some many most all each every no not yes did does do has
    have had be been being to into onto upon over under between among according although despite however
    unlike like near today several another""".split()
)
# Capitalised words that open sentences rather than name things.
_OPENERS = _FUNCTION_WORDS | frozenset(
    """born besides other later colleagues critics notable alumni graduates employees people films novels operas
    directed written composed founded established""".split()
)
# Words that are never relation keywords.
_STOPWORDS = _FUNCTION_WORDS | frozenset(
    """s same name named called known place person first last most than more less much other another located
    lie lies year years kind type""".split()
)
_STEM = 5

#: Synonym groups (5-letter stems) used to expand the question's relation keywords.
RELATION_GROUPS: tuple[frozenset[str], ...] = tuple(
    frozenset(w[:_STEM] for w in group.split())
    for group in (
        "born birth birthplace hometown native natives",
        "country citizen citizens citizenship nationality national republic",
        "studied study studies graduated graduates alumnus alumni attended attend university college institute "
        "alma mater school",
        "married marry spouse wife husband",
        "founded founder establish established creator created",
        "directed director directors filmmaker film films",
        "wrote written writer author novel novels novelist",
        "composed composer opera operas music",
        "worked work employer employed employees joined company organization firm",
        "headquartered headquarters based",
        "capital seat government",
        "located lies city town",
        "occupation profession living job",
        "released premiered premiere published staged performed appeared came",
    )
)

def _stems(words: str) -> frozenset[str]:
    return frozenset(w[:_STEM] for w in words.split())


@dataclass(frozen=True)
class AnswerType:
    """How to recognise one kind of answer.

    Attributes:
        triggers: Question words that ask for this type ("Which *city* ...").
        name_words: Stems that mark a name of this type from inside (*University*, *Laboratories*).
        before: ``(cue stem, connector)`` patterns ``cue [connector] CANDIDATE`` in a sentence
            ("*city of* X", "*born in* X"; an empty connector means adjacent).
        after: Cue stems of ``CANDIDATE is/was/serves as <cue>`` ("X *is a city*"; the first noun
            after the verb).
        near: Cue stems whose mere proximity counts a little.
    """

    triggers: tuple[str, ...]
    name_words: frozenset[str] = frozenset()
    before: tuple[tuple[str, str], ...] = ()
    after: frozenset[str] = frozenset()
    near: frozenset[str] = frozenset()


#: Answer types recognised in questions and how candidates of each type look.
ANSWER_TYPES: dict[str, AnswerType] = {
    "city": AnswerType(
        ("city", "town", "birthplace", "hometown", "headquartered", "based", "capital"),
        frozenset(),
        (("city", "of"), ("town", "of"), ("born", "in"), ("based", "in"), ("headq", "in"), ("capit", "is")),
        _stems("city town capital"),
        _stems("city town capital born birthplace headquartered based"),
    ),
    "country": AnswerType(
        ("country", "nationality", "citizen", "citizens", "citizenship"),
        _stems("republic"),
        (("count", "of"), ("citiz", "of"), ("repub", "of"), ("belon", "to")),
        _stems("country republic"),
        _stems("country citizen citizenship nationality republic"),
    ),
    "university": AnswerType(
        ("university", "college", "alma", "study", "studied", "attend", "attended", "school"),
        _stems("university college institute academy school"),
        (("studi", "at"), ("gradu", "from"), ("alumn", "of"), ("atten", "")),
        _stems("university college"),
        _stems("university college institute studied graduated alumnus alumni school academy"),
    ),
    "organization": AnswerType(
        ("company", "organization", "organisation", "firm", "employer", "employed", "employ", "work", "worked"),
        _stems("company laboratories works holdings industries mills shipping trading group corporation bank"),
        (("emplo", "by"), ("worke", "for"), ("joine", ""), ("found", "")),
        _stems("company firm business"),
        _stems("company organization firm employed joined worked employer"),
    ),
    "occupation": AnswerType(("occupation", "profession", "living", "job")),
    "industry": AnswerType(("industry", "business", "sector")),
}
# Relations whose object is a person (for the type of a bridge entity).
_PERSON_RELATIONS = _stems("director directed filmmaker composer composed author wrote writer spouse married "
                           "husband wife founder person")
_ORG_VERBS = frozenset({"employed", "employs", "employ", "hired", "hires"})
_COPULA = frozenset({"is", "was", "serves", "remains", "has", "became"})
_NUMERIC_RE = re.compile(r"\b(when|what year|which year|how many|how much|how old|number of|year)\b", re.I)
_WHO_RE = re.compile(r"\b(who|whom)\b", re.I)
_EARLY = re.compile(r"\b(first|earlier|earliest|older|oldest|before)\b", re.I)
_LATE = re.compile(r"\b(later|latest|last|younger|youngest|newer|newest|more recent|most recent|after)\b", re.I)
_KIND_NOUNS = frozenset({"company", "firm", "business", "industry", "enterprise"})
_ROLE_VERBS = frozenset({"is", "was", "as", "became"})
_ROLE_STOP = frozenset({"who", "born", "in", "and", "with", "from", "at", "of", "for", "whose", "based"})
@dataclass(frozen=True)
class QuestionAnalysis:
    """What :func:`analyse_question` reads from a question.

    Attributes:
        entities: Capitalised spans of the question.
        relations: Relation keyword stems, expanded with :data:`RELATION_GROUPS`.
        relation_words: The question's own relation words, in order (for reformulated queries).
        answer_type: ``number``, ``person``, a key of :data:`ANSWER_TYPES`, ``yesno``, ``choice``
            or ``other``.
        options: The two options of a comparison question, else empty.
        choose: ``"min"`` (earlier / older) or ``"max"`` (later / younger) for ``choice`` questions.
        compared_type: For comparisons, the type of value compared (``number`` or an answer type).
        inner: Relation stems next to the question's last entity (the first hop of a bridge
            question), expanded with :data:`RELATION_GROUPS`.
        bridge_type: The type of the first bridge entity as the inner relation implies it.
    """

    entities: tuple[str, ...]
    relations: frozenset[str]
    relation_words: tuple[str, ...]
    answer_type: str
    options: tuple[str, ...] = ()
    choose: str | None = None
    compared_type: str | None = None
    inner: frozenset[str] = frozenset()
    bridge_type: str = "other"


def tokenize(text: str) -> list[str]:
    """Split text into word tokens (letters, digits, inner apostrophes and hyphens; no possessive 's)."""
    return [t[:-2] if len(t) > 2 and t[-2:] in ("'s", "\u2019s") else t for t in _TOKEN_RE.findall(text)]


def _is_cap(token: str) -> bool:
    return token[:1].isupper()


def _span_positions(tokens: Sequence[str], lower_vocab: frozenset[str] = frozenset()) -> list[tuple[int, int]]:
    """(start, end) token positions of capitalised n-grams and numbers in one break-free chunk."""
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.isdigit():
            out.append((i, i + 1))
            i += 1
            continue
        if not _is_cap(tok):
            i += 1
            continue
        j = i + 1
        while j < len(tokens):
            if _is_cap(tokens[j]) and not tokens[j].isdigit():
                j += 1
                continue
            k = j
            while k < len(tokens) and tokens[k].lower() in _CONNECTORS:
                k += 1
            if k > j and k < len(tokens) and _is_cap(tokens[k]) and not tokens[k].isdigit():
                j = k + 1
            else:
                break
        start = i
        while start < j and (tokens[start].lower() in _OPENERS or tokens[start].lower() in lower_vocab):
            start += 1
        if start < j:
            out.append((start, j))
        i = j
    return out


def capitalized_spans(text: str) -> list[str]:
    """Capitalised n-grams and numbers of ``text``, in order of appearance.

    Args:
        text: Any text.

    Returns:
        Spans such as ``"Velora Quenn"``, ``"The Glass Orchard"`` -> ``"Glass Orchard"`` (a
        sentence opener is dropped), ``"Jean de la Tour"``, ``"1931"``.
    """
    spans: list[str] = []
    for chunk in _BREAK_RE.split(text):
        tokens = tokenize(chunk)
        spans.extend(" ".join(tokens[a:b]) for a, b in _span_positions(tokens))
    return spans


def _options(question: str) -> tuple[str, ...]:
    if re.match(r"\s*(?:are|do|did|is|were|does|was)\b.*\bsame\b", question, re.I):
        # "Are A and B citizens of the same country?": the first two named entities.
        entities = capitalized_spans(question)
        return (entities[0], entities[1]) if len(entities) >= 2 else ()
    patterns = (
        r"(?:,|:)\s*([^,:?]+?)\s+or\s+([^,:?]+?)\s*\?\s*$",
        r"^\s*between\s+([^,:?]+?)\s+and\s+([^,:?]+?)\s*,",
    )
    for pat in patterns:
        m = re.search(pat, question, re.I)
        if m is not None:
            options = (m.group(1).strip(), m.group(2).strip())
            if all(normalize_answer(o) for o in options):
                return options
    return ()


def question_options(question: str) -> list[str]:
    """The two options of a comparison question, in question order, or ``[]``.

    Examples: "Who was born first, A or B?", "Between A and B, which ...?", "Are A and B of the
    same nationality?".
    """
    return list(_options(question))


def asks_for_number(question: str) -> bool:
    """Whether the question asks for a number or year (*when*, *what year*, *how many*)."""
    return analyse_question(question).answer_type == "number"


def _answer_type(question: str, words: Sequence[str]) -> str:
    first_type: tuple[int, str] | None = None
    for idx, w in enumerate(words):
        for name, spec in ANSWER_TYPES.items():
            if w in spec.triggers and (first_type is None or idx < first_type[0]):
                first_type = (idx, name)
    for i, w in enumerate(words[:-1]):
        if w in ("who", "whom") and words[i + 1] in _ORG_VERBS:  # "Who employed X?" asks for an employer
            return "organization"
    num = _NUMERIC_RE.search(question)
    who = _WHO_RE.search(question)
    num_idx = len(tokenize(question[: num.start()])) if num else None
    who_idx = len(tokenize(question[: who.start()])) if who else None
    best: tuple[int, str] | None = first_type
    for pos, name in ((num_idx, "number"), (who_idx, "person")):
        if pos is not None and (best is None or pos <= best[0]):
            best = (pos, name)
    if best is None and re.match(r"\s*where\b", question, re.I):
        return "city"
    return best[1] if best is not None else "other"


@lru_cache(maxsize=16384)
def analyse_question(question: str) -> QuestionAnalysis:
    """Read entities, relation keywords, answer type and comparison structure from a question."""
    entities = tuple(capitalized_spans(question))
    entity_words = {w.lower() for s in entities for w in tokenize(s)}
    words = [w.lower() for w in tokenize(question)]
    relation_words: list[str] = []
    for w in words:
        if w in entity_words or w in _STOPWORDS or w.isdigit() or len(w) < 3 or w in relation_words:
            continue
        relation_words.append(w)
    stems = {w[:_STEM] for w in relation_words}
    expanded = set(stems)
    for group in RELATION_GROUPS:
        if stems & group:
            expanded |= group
    type_words = ["" if w in entity_words else w for w in words]  # "Wythesworth University" is no cue
    inner, bridge_type = _inner_relation(question, entities, relation_words)
    options = _options(question)
    if options:
        compared = _answer_type(question, type_words)
        if re.search(r"\bsame\b", question, re.I):
            return QuestionAnalysis(
                entities, frozenset(expanded), tuple(relation_words), "yesno", options, None,
                compared if compared not in ("person", "other") else "other",
            )
        choose = "max" if _LATE.search(question) and not _EARLY.search(question) else "min"
        return QuestionAnalysis(entities, frozenset(expanded), tuple(relation_words), "choice", options, choose,
                                "number")
    return QuestionAnalysis(entities, frozenset(expanded), tuple(relation_words), _answer_type(question, type_words),
                            inner=inner, bridge_type=bridge_type)


def _expand(stems: Iterable[str]) -> frozenset[str]:
    out = set(stems)
    for group in RELATION_GROUPS:
        if out & group:
            out |= group
    return frozenset(out)


def _inner_relation(
    question: str, entities: Sequence[str], relation_words: Sequence[str]
) -> tuple[frozenset[str], str]:
    """Relation words within three tokens of the last entity, and the bridge type they imply."""
    if not entities:
        return frozenset(), "other"
    toks = [t.lower() for t in tokenize(question)]
    ent = [t.lower() for t in tokenize(entities[-1])]
    pos = _find(toks, ent)
    if not pos:
        return frozenset(), "other"
    start, end = pos[-1], pos[-1] + len(ent)
    window = set(toks[max(0, start - 3) : start]) | set(toks[end : end + 3])
    near = [w for w in relation_words if w in window]
    bridge_type = "other"
    for w in near:
        for name, spec in ANSWER_TYPES.items():
            if w in spec.triggers and name in ("city", "country", "university", "organization"):
                bridge_type = name
    if bridge_type == "other" and any(w[:_STEM] in _PERSON_RELATIONS for w in near):
        bridge_type = "person"
    return _expand(w[:_STEM] for w in near), bridge_type


def relation_keywords(question: str) -> list[str]:
    """The question's own relation words (content words outside its named entities), in order."""
    return list(analyse_question(question).relation_words)


def _find(seq: Sequence[str], sub: Sequence[str]) -> list[int]:
    n = len(sub)
    if n == 0:
        return []
    first = sub[0]
    return [i for i, t in enumerate(seq) if t == first and tuple(seq[i : i + n]) == tuple(sub)]


# ---- hops --------------------------------------------------------------------------------------

# Noun phrases that denote an entity reached through a relation ("the founder of X", "the person
# who directed X", "the city where X is headquartered"): each is one bridge. A phrase followed by
# a name is an apposition ("the company Wralumax Group"), not a bridge.
_BRIDGE_NOUNS = (
    r"(?:person|organization|employer|founder|spouse|director|author|composer|filmmaker|writer|home city|"
    r"home country|hometown|birthplace|capital|capital city|seat of government|alma mater|"
    r"(?:university|company)(?!\s+[A-Z])|city (?:that|where)|country (?:of citizenship|where))"
)
_BRIDGE_NP = re.compile(r"\b[Tt]he " + _BRIDGE_NOUNS + r"\b")
# "What is the capital of X?": the first noun phrase is what is asked, not a bridge.
_ASKED_NP = re.compile(r"^(?:What|Who|Which \w+) (?:is|was) the " + _BRIDGE_NOUNS + r" of\b")


def estimate_hops(question: str, max_hops: int = 4) -> int:
    """How many searches a bridge question needs: one plus the relational noun phrases it nests.

    A rule read off English question shapes ("the founder of the employer of X" is three hops),
    not learned.
    Comparison questions are handled by their options, not by this count.

    Args:
        question: The question.
        max_hops: Cap on the estimate.

    Returns:
        An estimate in ``[1, max_hops]``.
    """
    n = len(_BRIDGE_NP.findall(question)) + 1 - (1 if _ASKED_NP.match(question) else 0)
    return max(1, min(max_hops, n))
