"""Questions about a generated world: single-hop, bridge (2-4 hops) and comparison.

Every question comes with its gold answer (and aliases), the canonical gold evidence per
hop, and a decomposition into sub-questions whose intermediate answers chain into the
next sub-question. Bridge questions never name their bridge entities, so the passages of
later hops cannot be found from the question alone.

Splits are disjoint in the entities they are *about*: every entity carries a split label
(see :attr:`World.split_of`), and a question of split ``s`` uses only entities labelled
``s`` as its topic, its bridge entities and its compared entities.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from searchenv.tasks.example import QAExample, SubQuestion
from searchenv.tasks.world.render import document, ref
from searchenv.tasks.world.world import ENTITY_TYPES, OCCUPATIONS, RELATIONS, SPLIT_NAMES, World

QUESTION_KINDS = ("single", "bridge2", "bridge3", "bridge4", "comparison")
# Give up on a kind after this many draws in a row that yield no new question.
MAX_MISSES = 3000

# relation -> question templates; "{x}'s" templates are used only with a plain name.
_Q: dict[str, tuple[str, ...]] = {
    "creator/film": ("Who directed {x}?", "Who was the film {x} directed by?", "By whom was the film {x} directed?"),
    "creator/novel": ("Who is the author of {x}?", "Who was {x} written by?", "By whom was the novel {x} written?"),
    "creator/opera": ("Who composed {x}?", "Who is the composer of {x}?", "By whom was the opera {x} composed?"),
    "work_year/film": (
        "In what year was {x} released?",
        "When was the film {x} released?",
        "What year was {x} released in?",
    ),
    "work_year/novel": (
        "In what year was {x} published?",
        "When was the novel {x} published?",
        "What year was {x} published in?",
    ),
    "work_year/opera": (
        "In what year was {x} first performed?",
        "When was the opera {x} first performed?",
        "What year was {x} first performed in?",
    ),
    "birthplace": ("In which city was {x} born?", "Where was {x} born?", "What is the birthplace of {x}?"),
    "birth_year": ("In what year was {x} born?", "When was {x} born?", "What is the birth year of {x}?"),
    "nationality": (
        "What is the nationality of {x}?",
        "Which country is {x} a citizen of?",
        "Of which country does {x} hold citizenship?",
    ),
    "occupation": ("What is the occupation of {x}?", "What does {x} do for a living?", "What is {x}'s profession?"),
    "employer": ("Which organization did {x} work for?", "Who employed {x}?", "For which company did {x} work?"),
    "spouse": ("Who was {x} married to?", "Who is the spouse of {x}?", "Whom did {x} marry?"),
    "alma_mater": ("Which university did {x} attend?", "Where did {x} study?", "What is the alma mater of {x}?"),
    "city_country": (
        "In which country is {x} located?",
        "Which country is the city of {x} located in?",
        "{x} is a city located in which country?",
    ),
    "capital": ("What is the capital of {x}?", "Which city is the capital of {x}?", "What is the capital city of {x}?"),
    "founder": ("Who founded {x}?", "Who was {x} founded by?", "By whom was the company {x} founded?"),
    "headquarters": (
        "In which city is {x} headquartered?",
        "Where is {x} headquartered?",
        "{x} is headquartered in which city?",
    ),
    "org_year": ("In what year was {x} founded?", "When was the company {x} founded?", "What year was {x} founded in?"),
    "industry": ("What industry is {x} in?", "In which industry is the company {x}?", "What kind of company is {x}?"),
    "uni_city": (
        "In which city is {x} located?",
        "Where is the university {x} located?",
        "{x} is located in which city?",
    ),
    "uni_year": (
        "In what year was {x} established?",
        "When was the university {x} established?",
        "What year was {x} established in?",
    ),
}
# relation -> noun phrases that denote the relation's object, for composing bridge questions.
_NP: dict[str, tuple[str, ...]] = {
    "creator/film": ("the director of {x}", "the person who directed {x}", "the filmmaker behind {x}"),
    "creator/novel": ("the author of {x}", "the writer of {x}", "the person who wrote {x}"),
    "creator/opera": ("the composer of {x}", "the person who composed {x}", "the composer behind {x}"),
    "birthplace": ("the birthplace of {x}", "the city where {x} was born", "the hometown of {x}"),
    "nationality": ("the country of citizenship of {x}", "the country {x} is a citizen of", "the home country of {x}"),
    "employer": ("the employer of {x}", "the company for which {x} worked", "the organization that employed {x}"),
    "spouse": ("the spouse of {x}", "the person {x} married", "the person married to {x}"),
    "alma_mater": ("the alma mater of {x}", "the university attended by {x}", "the university where {x} studied"),
    "city_country": (
        "the country where {x} is located",
        "the country that contains {x}",
        "the country in which {x} lies",
    ),
    "capital": ("the capital of {x}", "the capital city of {x}", "the seat of government of {x}"),
    "founder": ("the founder of {x}", "the person who founded {x}", "the person who established {x}"),
    "headquarters": (
        "the city where {x} is headquartered",
        "the headquarters city of {x}",
        "the city where {x} is based",
    ),
    "uni_city": ("the city where {x} is located", "the home city of {x}", "the city that hosts {x}"),
}
_COMPARE: dict[str, tuple[str, ...]] = {
    "born_first": (
        "Who was born first, {a} or {b}?",
        "Who is older, {a} or {b}?",
        "Between {a} and {b}, who was born earlier?",
    ),
    "same_nationality": (
        "Are {a} and {b} of the same nationality?",
        "Do {a} and {b} share the same nationality?",
        "Are {a} and {b} citizens of the same country?",
    ),
    "org_first": (
        "Which was founded first, {a} or {b}?",
        "Which company is older, {a} or {b}?",
        "Between {a} and {b}, which was established earlier?",
    ),
    "uni_first": (
        "Which university was established first, {a} or {b}?",
        "Which is older, {a} or {b}?",
        "Between {a} and {b}, which university was founded earlier?",
    ),
    "work_first": (
        "Which came out first, {a} or {b}?",
        "Which is older, {a} or {b}?",
        "Between {a} and {b}, which appeared earlier?",
    ),
    "same_country": (
        "Are {a} and {b} located in the same country?",
        "Are {a} and {b} in the same country?",
        "Do {a} and {b} lie in the same country?",
    ),
}
# comparison -> (entity type, relation compared)
_COMPARE_REL = {
    "born_first": ("person", "birth_year"),
    "same_nationality": ("person", "nationality"),
    "org_first": ("org", "org_year"),
    "uni_first": ("uni", "uni_year"),
    "work_first": ("work", "work_year"),
    "same_country": ("city", "city_country"),
}
_OCC_ALIASES = {"film director": ("director", "filmmaker"), "novelist": ("writer", "author")}
# Chains that loop back ("the spouse of the spouse") or give the answer away ("the occupation of
# the director of X" is "film director").
_BAD_PAIRS = {
    ("spouse", "spouse"),
    ("capital", "city_country"),
    ("city_country", "capital"),
    ("creator", "occupation"),
}


@dataclass(frozen=True)
class QuestionConfig:
    """What questions to generate and how many per split.

    Attributes:
        mix: ``(kind, weight)`` pairs; kinds are ``single``, ``bridge2``, ``bridge3``,
            ``bridge4`` and ``comparison``.
        train: Number of training questions.
        dev: Number of development questions.
        test: Number of test questions.
    """

    mix: tuple[tuple[str, float], ...] = (("bridge2", 1.0),)
    train: int = 2000
    dev: int = 250
    test: int = 250

    def __post_init__(self) -> None:
        if not self.mix:
            raise ValueError("mix must name at least one question kind")
        for kind, weight in self.mix:
            if kind not in QUESTION_KINDS:
                raise ValueError(f"unknown question kind {kind!r}; known: {QUESTION_KINDS}")
            if not weight > 0:
                raise ValueError(f"weight of {kind!r} must be positive, got {weight}")
        for split in SPLIT_NAMES:
            n = getattr(self, split)
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"{split} must be a non-negative int, got {n!r}")

    def counts(self, total: int) -> dict[str, int]:
        """Split ``total`` questions among the kinds by weight (largest remainder)."""
        weights = np.array([w for _, w in self.mix], dtype=float)
        exact = weights / weights.sum() * total
        base = np.floor(exact).astype(int)
        order = np.argsort(-(exact - base), kind="stable")
        base[order[: total - int(base.sum())]] += 1
        return {kind: int(n) for (kind, _), n in zip(self.mix, base, strict=True)}


def _key(relation: str, world: World, subject: int) -> str:
    """Template key: creator/work_year depend on the kind of work."""
    if relation in ("creator", "work_year"):
        return f"{relation}/{world.work_kind_name(subject)}"
    return relation


@cache
def bridge_chains(hops: int) -> tuple[tuple[str, ...], ...]:
    """All relation chains of ``hops`` relations whose types connect.

    Every relation but the last must lead to an entity; ``creator`` and ``work_year``
    only start a chain (nothing leads to a work).
    """
    entity_rels = [r for r, (_, o) in RELATIONS.items() if o in ENTITY_TYPES]
    chains: list[tuple[str, ...]] = [(r,) for r in entity_rels]
    for _ in range(hops - 2):
        chains = [
            c + (r,)
            for c in chains
            for r in entity_rels
            if RELATIONS[r][0] == RELATIONS[c[-1]][1] and (c[-1], r) not in _BAD_PAIRS
        ]
    out = [
        c + (r,)
        for c in chains
        for r in RELATIONS
        if RELATIONS[r][0] == RELATIONS[c[-1]][1] and (c[-1], r) not in _BAD_PAIRS
    ]
    return tuple(out)


# "the film {x}": an appositive that only reads well with a name in {x}.
_APPOSITIVE = re.compile(r"the (university|company|film|novel|opera|city of) \{x\}")


def _fill(template: str, x: str, name: bool) -> str:
    """Put ``x`` into ``template``; a name with its own "the" ("the University of X") drops the appositive."""
    if name and x.startswith("the "):
        template = _APPOSITIVE.sub("{x}", template)
    return template.format(x=x)


def _mentions(text: str, phrase: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(phrase.lower()) + r"(?!\w)", text.lower()) is not None


class QuestionGenerator:
    """Draw questions of one split from a world.

    Args:
        world: The world.
        split: ``train``, ``dev`` or ``test``.
        rng: Seeded generator for this split.
    """

    def __init__(self, world: World, split: str, rng: np.random.Generator) -> None:
        if split not in SPLIT_NAMES:
            raise ValueError(f"unknown split {split!r}")
        self.world = world
        self.split = split
        self.label = SPLIT_NAMES.index(split)
        self.rng = rng
        self._pools = {t: np.flatnonzero(world.split_of[t] == self.label) for t in ENTITY_TYPES}
        self._valid: dict[tuple[str, ...], np.ndarray] = {}

    def valid_topics(self, chain: tuple[str, ...]) -> np.ndarray:
        """Topics of this split whose chain exists, has bridges of this split and no cycle."""
        if chain not in self._valid:
            w = self.world
            topic_type = RELATIONS[chain[0]][0]
            pool = self._pools[topic_type]
            ok = np.ones(len(pool), dtype=bool)
            seen: list[tuple[str, np.ndarray]] = [(topic_type, pool)]
            cur = pool
            for i, rel in enumerate(chain):
                nxt = w.fact_array(rel)[cur]
                ok &= nxt >= 0
                nxt = np.where(nxt >= 0, nxt, 0)
                otype = RELATIONS[rel][1]
                if otype in ENTITY_TYPES:
                    for t, prev in seen:
                        if t == otype:
                            ok &= nxt != prev
                    if i < len(chain) - 1:
                        ok &= w.split_of[otype][nxt] == self.label
                    seen.append((otype, nxt))
                cur = nxt
            self._valid[chain] = pool[ok]
        return self._valid[chain]

    # -------------------------------------------------------------- helpers
    def _choice(self, options: Sequence[str], plain: bool = True) -> str:
        """A template among the first ``template_variety``.

        With ``plain=False`` (a noun phrase goes into ``{x}``), templates that only read well
        with a name ("{x}'s", "the film {x}") are skipped.
        """
        usable = [o for o in options if plain or not ("{x}'s" in o or _APPOSITIVE.search(o))]
        opts = [o for o in options[: self.world.config.template_variety] if o in usable] or usable
        return opts[int(self.rng.integers(len(opts)))]

    def _topic(self, etype: str) -> int | None:
        pool = self._pools[etype]
        return int(pool[int(self.rng.integers(len(pool)))]) if len(pool) else None

    def answers(self, relation: str, value: int) -> tuple[str, ...]:
        """Gold answer and aliases for the object ``value`` of ``relation``."""
        w = self.world
        otype = RELATIONS[relation][1]
        text = w.value_text(relation, value)
        if otype == "country":
            return (text, f"Republic of {text}")
        if otype == "occupation":
            return (text, *_OCC_ALIASES.get(OCCUPATIONS[value], ()))
        if otype == "industry":
            return (text, f"{text} industry")
        return (text,)

    def _sub(self, relation: str, subject: int, value: int) -> SubQuestion:
        w = self.world
        subject_type = RELATIONS[relation][0]
        q = _fill(self._choice(_Q[_key(relation, w, subject)]), ref(w.name(subject_type, subject)), name=True)
        q = q[0].upper() + q[1:]
        return SubQuestion(q, w.value_text(relation, value), w.evidence(relation, subject))

    # -------------------------------------------------------------- kinds
    def single(self) -> dict | None:
        """One single-hop question, or ``None`` if the draw was unusable."""
        relations = list(RELATIONS)
        rel = relations[int(self.rng.integers(len(relations)))]
        return self._chain((rel,))

    def bridge(self, hops: int) -> dict | None:
        """One bridge question over ``hops`` relations, or ``None``."""
        chains = bridge_chains(hops)
        return self._chain(chains[int(self.rng.integers(len(chains)))])

    def _chain(self, chain: tuple[str, ...]) -> dict | None:
        w = self.world
        topic_type = RELATIONS[chain[0]][0]
        valid = self.valid_topics(chain)
        if not len(valid):
            return None
        topic = int(valid[int(self.rng.integers(len(valid)))])
        entities = [(topic_type, topic)]
        subs: list[SubQuestion] = []
        subject = topic
        for i, rel in enumerate(chain):
            value = w.fact(rel, subject)
            if value is None:
                return None
            otype = RELATIONS[rel][1]
            subs.append(self._sub(rel, subject, value))
            if otype in ENTITY_TYPES:
                if (otype, value) in entities:
                    return None  # a cycle: the answer is an entity already in the chain
                if i < len(chain) - 1 and w.split_of[otype][value] != self.label:
                    return None  # bridge entities belong to one split only
                entities.append((otype, value))
            subject = value
        # Compose the question from the topic name outwards.
        x = ref(w.name(topic_type, topic))
        for i, rel in enumerate(chain[:-1]):
            subject_of = topic if i == 0 else entities[i][1]
            x = _fill(self._choice(_NP[_key(rel, w, subject_of)], plain=False), x, name=i == 0)
        last_subject = entities[len(chain) - 1][1]
        single = len(chain) == 1
        question = _fill(self._choice(_Q[_key(chain[-1], w, last_subject)], plain=single), x, name=single)
        question = question[0].upper() + question[1:]
        answers = self.answers(chain[-1], subject)
        if any(_mentions(question, a) for a in answers):
            return None
        # No passage of a later hop may name the topic, or the question alone would reach it
        # (the founder of a company is named in the company's passage, for instance).
        topic_name = w.name(topic_type, topic)
        for sub in subs[1:]:
            if any(_mentions(document(w, d).contents, topic_name) for d in sub.evidence_ids):
                return None
        bridges = entities[1 : len(chain)]
        return {
            "question": question,
            "answers": answers,
            "evidence": tuple(s.evidence_ids[0] for s in subs),
            "decomposition": tuple(subs),
            "signature": ("chain", chain, topic),
            "type": "single-hop" if len(chain) == 1 else "bridge",
            "hops": len(chain),
            "metadata": {
                "relations": list(chain),
                "topic": f"{topic_type}{topic}",
                "bridge_entities": [f"{t}{i}" for t, i in bridges],
                "bridge_names": [w.name(t, i) for t, i in bridges],
            },
        }

    def comparison(self) -> dict | None:
        """One comparison question (which is earlier / are both the same), or ``None``."""
        w = self.world
        kinds = list(_COMPARE)
        kind = kinds[int(self.rng.integers(len(kinds)))]
        etype, rel = _COMPARE_REL[kind]
        a = self._topic(etype)
        pool = self._pools[etype]
        if a is None or len(pool) < 2:
            return None
        b = self._partner(etype, rel, a, yes_no=kind.startswith("same"))
        if b is None or b == a:
            return None
        va, vb = w.fact(rel, a), w.fact(rel, b)
        if va is None or vb is None:
            return None
        na, nb = w.name(etype, a), w.name(etype, b)
        if kind.startswith("same"):
            answers: tuple[str, ...] = ("yes",) if va == vb else ("no",)
        else:
            if va == vb:
                return None
            answers = (na,) if va < vb else (nb,)
        question = self._choice(_COMPARE[kind]).format(a=ref(na), b=ref(nb))
        question = question[0].upper() + question[1:]
        subs = (self._sub(rel, a, va), self._sub(rel, b, vb))
        return {
            "question": question,
            "answers": answers,
            "evidence": tuple(s.evidence_ids[0] for s in subs),
            "decomposition": subs,
            "signature": ("comparison", kind, min(a, b), max(a, b)),
            "type": "comparison",
            "hops": 2,
            "metadata": {
                "relations": [rel, rel],
                "comparison": kind,
                "topic": f"{etype}{a}",
                "compared_entities": [f"{etype}{a}", f"{etype}{b}"],
                "bridge_entities": [],
                "bridge_names": [],
            },
        }

    def _partner(self, etype: str, rel: str, a: int, yes_no: bool) -> int | None:
        """The second entity of a comparison: half the yes/no pairs agree; names often collide."""
        w = self.world
        pool = self._pools[etype]
        if yes_no and self.rng.random() < 0.5:
            arr = w.nationality if rel == "nationality" else w.city_country
            same = pool[arr[pool] == arr[a]]
            same = same[same != a]
            return int(same[int(self.rng.integers(len(same)))]) if len(same) else None
        if etype == "person" and self.rng.random() < min(1.0, 0.3 * w.config.distractor_density):
            sid = w.person_name.surname_id(a)
            # People sharing a surname are the near-collisions; search a bounded sample.
            sample = pool[self.rng.integers(0, len(pool), min(len(pool), 4000))]
            kin = [int(p) for p in sample if p != a and w.person_name.surname_id(int(p)) == sid]
            if kin:
                return kin[int(self.rng.integers(len(kin)))]
        return int(pool[int(self.rng.integers(len(pool)))])

    def draw(self, kind: str) -> dict | None:
        """One question of ``kind`` (see :data:`QUESTION_KINDS`), or ``None`` if the draw failed."""
        if kind == "single":
            return self.single()
        if kind.startswith("bridge"):
            return self.bridge(int(kind[-1]))
        if kind == "comparison":
            return self.comparison()
        raise ValueError(f"unknown question kind {kind!r}")


def generate_questions(world: World, config: QuestionConfig, id_prefix: str = "") -> dict[str, list[QAExample]]:
    """Generate every split of questions.

    Args:
        world: The world.
        config: Kinds and split sizes.
        id_prefix: Prepended to every example id.

    Returns:
        ``{"train": [...], "dev": [...], "test": [...]}``; question texts are unique across splits.

    Raises:
        ValueError: If the world is too small to yield the requested questions.
    """
    seen: set[str] = set()
    signatures: set[tuple] = set()
    out: dict[str, list[QAExample]] = {}
    for s_idx, split in enumerate(SPLIT_NAMES):
        rng = np.random.default_rng([world.config.seed, 0x9E57, s_idx])
        gen = QuestionGenerator(world, split, rng)
        drafts: list[tuple[str, dict]] = []
        for kind, n in config.counts(getattr(config, split)).items():
            got, misses = 0, 0
            while got < n:
                if misses >= MAX_MISSES:
                    raise ValueError(
                        f"world too small: only {got} of {n} {kind} questions for split {split!r} "
                        f"({MAX_MISSES} draws in a row gave nothing new); raise num_passages"
                    )
                misses += 1
                d = gen.draw(kind)
                # One question per (relations, topic) or compared pair, and unique texts.
                if d is None or d["question"] in seen or d["signature"] in signatures:
                    continue
                seen.add(d["question"])
                signatures.add(d["signature"])
                misses = 0
                d["metadata"]["kind"] = kind
                drafts.append((kind, d))
                got += 1
        order = rng.permutation(len(drafts))
        out[split] = [_example(f"{id_prefix}{split}-{n:05d}", drafts[int(j)][1]) for n, j in enumerate(order)]
    return out


def _example(qid: str, d: dict) -> QAExample:
    return QAExample(
        id=qid,
        question=d["question"],
        answers=tuple(d["answers"]),
        evidence_ids=tuple(d["evidence"]),
        decomposition=tuple(d["decomposition"]),
        type=d["type"],
        hops=int(d["hops"]),
        metadata=d["metadata"],
    )


def entity_keys(examples: Iterable[QAExample]) -> set[str]:
    """Topic, bridge and compared entity keys (``person12``) used by ``examples``."""
    keys: set[str] = set()
    for e in examples:
        keys.add(str(e.metadata["topic"]))
        keys.update(str(k) for k in e.metadata.get("bridge_entities", ()))
        keys.update(str(k) for k in e.metadata.get("compared_entities", ()))
    return keys
