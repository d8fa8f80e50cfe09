"""Encyclopedia-style passages of a :class:`~searchenv.tasks.world.world.World`, written to be read.

A passage opens by naming its subject in full, then states its facts in shuffled order among
filler sentences, so a fact can sit anywhere in the passage. After the opening, the subject is
referred to by a short form (a person's surname, the first word of a company's name), a pronoun
or a description ("the film", "the company"), so the sentence that states a fact often does not
name its subject. Each fact has eight or more phrasings with varied word order (the
``template_variety`` dial picks how many are in play), and most facts are stated in two passages
(a film's passage says who directed it; the director's works passage lists the film).

Passages also state true facts of *other* entities in the same phrasings: a biography says where
a friend was born, a career passage where a colleague works, a film's passage who directed a
film it is compared with. A reader that takes the first city near "born" is wrong whenever the
friend's sentence comes first; a reader must track who each sentence is about. A pronoun never
follows a sentence about someone else (the subject is named again there), so the text stays
unambiguous for a careful reader. Mention passages name entities without stating any fact a
question asks about.

Passage order in the corpus: countries, cities, universities, organizations, people
(biography, career), works, mentions. Ids name the entity (``person12-bio``, ``city3``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from searchenv.corpus import Document
from searchenv.tasks.world.phrasings import (
    _ACQUAINTANCE,
    _ALUMNI,
    _BIRTH,
    _CAPITAL_OF,
    _CITY,
    _CITY_OTHER,
    _COLLEAGUE,
    _COUNTRY,
    _COUNTRY_CITIES,
    _COUNTRY_OTHER,
    _CREATOR,
    _EDUCATION,
    _EMPLOYEES,
    _EMPLOYER,
    _FOUNDED,
    _HQ,
    _INDUSTRY,
    _MOVED,
    _NATIONALITY,
    _NATIVE_ONE,
    _NATIVES,
    _NEIGHBOUR,
    _OCCUPATION,
    _OPEN_CAREER,
    _OPEN_PERSON,
    _OPEN_PERSONAL,
    _OPEN_WORKS,
    _ORG_FILLER,
    _ORG_FOUNDED,
    _ORG_OTHER,
    _PERSON_FILLER,
    _PLACE_FILLER,
    _RESIDENTS,
    _SPOUSE,
    _TOPICS,
    _UNI_CITY,
    _UNI_FILLER,
    _UNI_OTHER,
    _UNI_YEAR,
    _WORK_FILLER,
    _WORK_OTHER,
    _WORK_YEAR,
    _WORKS,
)
from searchenv.tasks.world.world import INDUSTRIES, OCCUPATIONS, World

_MASK = (1 << 63) - 1
_KIND_CODES = {
    "country": 1, "city": 2, "uni": 3, "org": 4, "bio": 5, "career": 6, "work": 7, "mention": 8,
    "personal": 9, "works": 10, "people": 11, "cities": 12, "staff": 13, "alumni": 14,
}  # fmt: skip


def _rng(world: World, kind: str, i: int) -> random.Random:
    """A private generator for one passage, so passages can be rendered in any order."""
    return random.Random((world._text_seed * 1_000_003 + _KIND_CODES[kind] * 0x9E3779B97F4A7C15 + i) & _MASK)


def _pick(rng: random.Random, world: World, templates: Sequence[str]) -> str:
    return templates[rng.randrange(min(len(templates), world.config.template_variety))]


def _join(names: Sequence[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def ref(name: str) -> str:
    """A name as used inside a sentence ("the University of X")."""
    return f"the {name}" if name.startswith("University of ") else name


def _sentences(parts: Sequence[str]) -> str:
    return " ".join(p[0].upper() + p[1:] for p in parts)


def _article(occupation: str) -> str:
    return "an" if occupation[0] in "aeiou" else "a"


def is_female(world: World, person: int) -> bool:
    """The grammatical gender a person's passages use (a fixed function of the world and index)."""
    h = (world._text_seed ^ (int(person) * 0x9E3779B97F4A7C15)) & _MASK
    h = ((h ^ (h >> 31)) * 0xBF58476D1CE4E5B9) & _MASK
    return bool((h >> 29) & 1)


# ------------------------------------------------------------------ subjects and sentences
@dataclass(frozen=True)
class _Subject:
    """How a passage names its subject: in full, by short forms, and by pronoun.

    Attributes:
        full: The full name (used in the opening sentence and after a sentence about another).
        short: Other names that refer to the subject alone in this passage (surname, "the film").
        pronoun: Subject pronoun ("she", "it").
        possessive: Possessive pronoun ("her", "its").
    """

    full: str
    short: tuple[str, ...]
    pronoun: str
    possessive: str


@dataclass(frozen=True)
class _Fact:
    """One sentence of a passage: a template and its fields; ``other`` names another subject."""

    template: str
    fields: Mapping[str, str]
    other: _Subject | None = None


def _person(world: World, i: int, role: str = "") -> _Subject:
    n = world.name("person", i)
    female = is_female(world, i)
    short = (world.surname(i),) + ((f"the {role}",) if role else ())
    return _Subject(n, short, "she" if female else "he", "her" if female else "his")


def _thing(name: str, *short: str) -> _Subject:
    return _Subject(name, tuple(short), "it", "its")


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


# ``{s}`` in the position of a grammatical subject, where a subject pronoun reads correctly.
_SUBJECT_SLOT = re.compile(r"(?:^|, |\b(?:where|which|that) )\{s\}|^\{sp\}")


def _write(subject: _Subject, opening: str, facts: Sequence[_Fact], rng: random.Random) -> str:
    """The passage text: the opening, then the facts in the given order with varied references.

    Templates use ``{s}`` for the sentence's subject, ``{sp}`` for its possessive, ``{pr}`` /
    ``{pp}`` for its pronoun / possessive pronoun when it is named earlier in the same sentence.
    A sentence about the passage's subject names it in full, by a short form or by pronoun (in
    the slot of a grammatical subject only); right after a sentence about another entity the
    subject is named in full, so a short form shared with that entity is never ambiguous.
    """
    out = [opening]
    after_own = True
    for fact in facts:
        about = fact.other or subject
        if fact.other is not None or not after_own:
            form = about.full
        else:
            # A description ("the novelist") never names what its own sentence says.
            text = " ".join((fact.template, *fact.fields.values()))
            short = [f for f in subject.short if f.removeprefix("the ") not in text]
            pronoun = _SUBJECT_SLOT.search(fact.template) is not None
            form = rng.choice([*short, subject.full, subject.full] + [subject.pronoun] * (1 if pronoun else 0))
        is_pronoun = form == about.pronoun
        out.append(
            fact.template.format(
                s=form,
                sp=about.possessive if is_pronoun else _possessive(form),
                pr=about.pronoun,
                pp=about.possessive,
                **fact.fields,
            )
        )
        after_own = fact.other is None
    return _sentences(out)



# ------------------------------------------------------------------ passages
def _other(rng: random.Random, count: int, *exclude: int) -> int:
    """A random entity index other than ``exclude`` (the passage's subject and its relatives)."""
    while True:
        j = rng.randrange(count)
        if j not in exclude or count <= len(exclude):
            return j


def _has_distractor(rng: random.Random, world: World) -> bool:
    """Whether a passage states a fact of another entity (more often with more distractors)."""
    return rng.random() < min(1.0, 0.6 * float(world.config.distractor_density))


def _person_facts(world: World, rng: random.Random, q: int, relation: str) -> _Fact:
    """A fact of person ``q`` stated in the same phrasings as a subject's own."""
    other = _person(world, q)
    if relation == "birthplace":
        return _Fact(
            _pick(rng, world, _BIRTH),
            {"c": world.name("city", int(world.birthplace[q])), "y": str(int(world.birth_year[q]))},
            other,
        )
    if relation == "nationality":
        return _Fact(_pick(rng, world, _NATIONALITY), {"k": world.name("country", int(world.nationality[q]))}, other)
    if relation == "alma_mater":
        return _Fact(_pick(rng, world, _EDUCATION), {"u": ref(world.name("uni", int(world.alma_mater[q])))}, other)
    if relation == "employer":
        occ = OCCUPATIONS[int(world.occupation[q])]
        fields = {"o": world.name("org", int(world.employer[q])), "a": _article(occ), "occ": occ}
        return _Fact(_pick(rng, world, _EMPLOYER), fields, other)
    return _Fact(_pick(rng, world, _SPOUSE), {"p": world.name("person", int(world.spouse[q]))}, other)


def _fillers(rng: random.Random, templates: Sequence[str], k: int, **fields: str) -> list[_Fact]:
    return [_Fact(t, fields) for t in rng.sample(list(templates), k)]


def _render(rng: random.Random, subject: _Subject, opening: str, units: Sequence[_Fact | tuple[_Fact, ...]]) -> str:
    """Shuffle units (a tuple stays together, in order) and write the passage."""
    order = list(units)
    rng.shuffle(order)
    flat = [f for u in order for f in (u if isinstance(u, tuple) else (u,))]
    return _write(subject, opening, flat, rng)


def person_bio(world: World, i: int) -> Document:
    """A person's biography: birth, occupation, nationality, education (maybe a second city)."""
    rng = _rng(world, "bio", i)
    occ = OCCUPATIONS[int(world.occupation[i])]
    me = _person(world, i, occ)
    units: list[_Fact | tuple[_Fact, ...]] = [
        _Fact(
            _pick(rng, world, _BIRTH),
            {"c": world.name("city", int(world.birthplace[i])), "y": str(int(world.birth_year[i]))},
        ),
        _Fact(_pick(rng, world, _OCCUPATION), {"a": _article(occ), "occ": occ}),
        _Fact(_pick(rng, world, _NATIONALITY), {"k": world.name("country", int(world.nationality[i]))}),
        _Fact(_pick(rng, world, _EDUCATION), {"u": ref(world.name("uni", int(world.alma_mater[i])))}),
        *_fillers(rng, _PERSON_FILLER, 1),
    ]
    if world.moved_to[i] >= 0:
        units.append(_Fact(_pick(rng, world, _MOVED), {"c": world.name("city", int(world.moved_to[i]))}))
    if _has_distractor(rng, world):
        q = _other(rng, world.sizes.people, i, int(world.spouse[i]))
        relation = rng.choice(("birthplace", "nationality", "alma_mater"))
        units.append(
            (
                _Fact(rng.choice(_ACQUAINTANCE), {"q": world.name("person", q)}),
                _person_facts(world, rng, q, relation),
            )
        )
    opening = rng.choice(_OPEN_PERSON).format(n=me.full, pp=me.possessive)
    return Document(world.doc_id("person", i, "bio"), me.full, _render(rng, me, opening, units))


def person_career(world: World, i: int) -> Document:
    """A person's career: occupation and employer."""
    rng = _rng(world, "career", i)
    occ = OCCUPATIONS[int(world.occupation[i])]
    me = _person(world, i, occ)
    units: list[_Fact | tuple[_Fact, ...]] = [
        _Fact(
            _pick(rng, world, _EMPLOYER),
            {"o": world.name("org", int(world.employer[i])), "a": _article(occ), "occ": occ},
        ),
        *_fillers(rng, _PERSON_FILLER, 2),
    ]
    if _has_distractor(rng, world):
        q = _other(rng, world.sizes.people, i, int(world.spouse[i]))
        units.append(
            (_Fact(rng.choice(_COLLEAGUE), {"q": world.name("person", q)}), _person_facts(world, rng, q, "employer"))
        )
    opening = rng.choice(_OPEN_CAREER).format(n=me.full, pp=me.possessive)
    return Document(world.doc_id("person", i, "career"), me.full, _render(rng, me, opening, units))


def person_personal(world: World, i: int) -> Document:
    """A married person's personal life: the spouse."""
    rng = _rng(world, "personal", i)
    me = _person(world, i)
    spouse = int(world.spouse[i])
    units: list[_Fact | tuple[_Fact, ...]] = [
        _Fact(_pick(rng, world, _SPOUSE), {"p": world.name("person", spouse)}),
        _Fact("The couple had {n} children.", {"n": rng.choice(("two", "three", "no"))}),
        *_fillers(rng, _PERSON_FILLER, 1),
    ]
    if _has_distractor(rng, world):
        q = _other(rng, world.sizes.people, i, spouse)
        if world.spouse[q] >= 0 and int(world.spouse[q]) != i:
            units.append(
                (_Fact(rng.choice(_NEIGHBOUR), {"q": world.name("person", q)}), _person_facts(world, rng, q, "spouse"))
            )
    opening = rng.choice(_OPEN_PERSONAL).format(n=me.full, pp=me.possessive)
    return Document(world.doc_id("person", i, "personal"), me.full, _render(rng, me, opening, units))


def person_works(world: World, i: int) -> Document:
    """What a person made: works (with years) and companies founded (with years)."""
    rng = _rng(world, "works", i)
    me = _person(world, i)
    units: list[_Fact | tuple[_Fact, ...]] = []
    works = world.listed_works(i)
    if works:
        kind = world.work_kind_name(works[0])
        titles = [f"{world.name('work', w)} ({int(world.work_year[w])})" for w in works]
        units.append(_Fact(_pick(rng, world, _WORKS[kind]), {"w": _join(titles)}))
    for o in world.founded_orgs(i):
        units.append(_Fact(_pick(rng, world, _FOUNDED), {"o": world.name("org", o), "y": str(int(world.org_year[o]))}))
    units.extend(_fillers(rng, _PERSON_FILLER, 1))
    opening = rng.choice(_OPEN_WORKS).format(n=me.full, pp=me.possessive)
    return Document(world.doc_id("person", i, "works"), me.full, _render(rng, me, opening, units))


def person_docs(world: World, i: int) -> Iterator[Document]:
    """All passages of a person: biography, career, personal life if married, works if any."""
    yield person_bio(world, i)
    yield person_career(world, i)
    if world.spouse[i] >= 0:
        yield person_personal(world, i)
    if world.listed_works(i) or world.founded_orgs(i):
        yield person_works(world, i)


def _work_facts(world: World, rng: random.Random, w: int, other: _Subject | None = None) -> list[_Fact]:
    kind = world.work_kind_name(w)
    return [
        _Fact(_pick(rng, world, _CREATOR[kind]), {"p": world.name("person", int(world.creator[w]))}, other),
        _Fact(_pick(rng, world, _WORK_YEAR[kind]), {"y": str(int(world.work_year[w]))}, other),
    ]


def work_doc(world: World, w: int) -> Document:
    """A film, novel or opera: creator and year, in separate sentences."""
    rng = _rng(world, "work", w)
    t = world.name("work", w)
    kind = world.work_kind_name(w)
    me = _thing(t, f"the {kind}")
    units: list[_Fact | tuple[_Fact, ...]] = [
        *_work_facts(world, rng, w),
        *_fillers(rng, _WORK_FILLER, 1, c=world.name("city", rng.randrange(world.sizes.cities))),
    ]
    if _has_distractor(rng, world):
        q = _other(rng, world.sizes.works, w)
        other = _thing(world.name("work", q))
        units.append((_Fact(rng.choice(_WORK_OTHER), {"q": other.full}), rng.choice(_work_facts(world, rng, q, other))))
    opening = f"{t} is {_article(kind)} {kind}."
    return Document(world.doc_id("work", w), t, _render(rng, me, opening, units))


def _place_other(
    rng: random.Random,
    world: World,
    etype: str,
    subject: int,
    bank: Sequence[str],
    intros: Sequence[str],
    key: str,
    value_type: str,
    values: Any,
) -> tuple[_Fact, _Fact]:
    """Another city (country) introduced, then its country (capital) in the subject's phrasings."""
    q = _other(rng, world.count(etype), subject)
    other = _thing(world.name(etype, q))
    fact = _Fact(_pick(rng, world, bank), {key: world.name(value_type, int(values[q]))}, other)
    return _Fact(rng.choice(intros), {"q": other.full}), fact


def city_doc(world: World, c: int) -> Document:
    """A city: its country and whether it is the capital."""
    rng = _rng(world, "city", c)
    name = world.name("city", c)
    me = _thing(name, "the city")
    k = int(world.city_country[c])
    kname = world.name("country", k)
    units: list[_Fact | tuple[_Fact, ...]] = [_Fact(_pick(rng, world, _CITY), {"k": kname})]
    if int(world.capital[k]) == c:
        units.append(_Fact(_pick(rng, world, _CAPITAL_OF), {"k": kname}))
    units.extend(_fillers(rng, _PLACE_FILLER, 1))
    if _has_distractor(rng, world):
        units.append(_place_other(rng, world, "city", c, _CITY, _CITY_OTHER, "k", "country", world.city_country))
    opening = rng.choice(("{n} is a city.", "This passage is about the city of {n}.", "{n} is a town of old streets."))
    return Document(world.doc_id("city", c), name, _render(rng, me, opening.format(n=name), units))


def country_doc(world: World, k: int) -> Document:
    """A country: its capital."""
    rng = _rng(world, "country", k)
    name = world.name("country", k)
    me = _thing(name, "the country")
    units: list[_Fact | tuple[_Fact, ...]] = [
        _Fact(_pick(rng, world, _COUNTRY), {"c": world.name("city", int(world.capital[k]))}),
        *_fillers(rng, _PLACE_FILLER, 1),
    ]
    if _has_distractor(rng, world) and world.sizes.countries > 1:
        units.append(_place_other(rng, world, "country", k, _COUNTRY, _COUNTRY_OTHER, "c", "city", world.capital))
    opening = rng.choice(("{n} is a country.", "This passage is about {n}.", "{n} is a small republic."))
    return Document(world.doc_id("country", k), name, _render(rng, me, opening.format(n=name), units))


def _org_facts(world: World, rng: random.Random, o: int, other: _Subject | None = None) -> list[_Fact]:
    return [
        _Fact(
            _pick(rng, world, _ORG_FOUNDED),
            {"p": world.name("person", int(world.founder[o])), "y": str(int(world.org_year[o]))},
            other,
        ),
        _Fact(_pick(rng, world, _INDUSTRY), {"ind": INDUSTRIES[int(world.industry[o])]}, other),
        _Fact(_pick(rng, world, _HQ), {"c": world.name("city", int(world.headquarters[o]))}, other),
    ]


def org_doc(world: World, o: int) -> Document:
    """An organization: founder, year, industry, headquarters, each in its own sentence."""
    rng = _rng(world, "org", o)
    name = world.name("org", o)
    me = _thing(name, name.split()[0], "the company")
    units: list[_Fact | tuple[_Fact, ...]] = [*_org_facts(world, rng, o), *_fillers(rng, _ORG_FILLER, 1)]
    if _has_distractor(rng, world):
        q = _other(rng, world.sizes.orgs, o)
        other = _thing(world.name("org", q))
        units.append((_Fact(rng.choice(_ORG_OTHER), {"q": other.full}), rng.choice(_org_facts(world, rng, q, other))))
    opening = rng.choice(("{n} is a company.", "This passage is about {n}.", "{n} is a business of long standing."))
    return Document(world.doc_id("org", o), name, _render(rng, me, opening.format(n=name), units))


def _uni_facts(world: World, rng: random.Random, u: int, other: _Subject | None = None) -> list[_Fact]:
    return [
        _Fact(_pick(rng, world, _UNI_CITY), {"c": world.name("city", int(world.uni_city[u]))}, other),
        _Fact(_pick(rng, world, _UNI_YEAR), {"y": str(int(world.uni_year[u]))}, other),
    ]


def uni_doc(world: World, u: int) -> Document:
    """A university: city and founding year."""
    rng = _rng(world, "uni", u)
    name = ref(world.name("uni", u))
    me = _thing(name, "the university")
    units: list[_Fact | tuple[_Fact, ...]] = [*_uni_facts(world, rng, u), *_fillers(rng, _UNI_FILLER, 1)]
    if _has_distractor(rng, world):
        q = _other(rng, world.sizes.unis, u)
        other = _thing(ref(world.name("uni", q)))
        units.append((_Fact(rng.choice(_UNI_OTHER), {"q": other.full}), rng.choice(_uni_facts(world, rng, q, other))))
    opening = rng.choice(("{n} is a university.", "This passage is about {n}.", "{n} is a place of learning."))
    return Document(world.doc_id("uni", u), world.name("uni", u), _render(rng, me, opening.format(n=name), units))


def city_people(world: World, c: int) -> Document:
    """People born in a city (and, as distractors, people who only lived there)."""
    rng = _rng(world, "people", c)
    name = world.name("city", c)
    natives = world.notable_natives(c)
    tpl = _NATIVES if len(natives) > 1 else _NATIVE_ONE
    parts = [_pick(rng, world, tpl).format(c=name, ps=_join([world.name("person", p) for p in natives]))]
    residents = world.listed_residents(c)
    if residents:
        parts.append(rng.choice(_RESIDENTS).format(c=name, ps=_join([world.name("person", p) for p in residents])))
    return Document(world.doc_id("city", c, "people"), f"People from {name}", _sentences(parts))


def country_cities(world: World, k: int) -> Document:
    """Cities of a country other than its capital."""
    rng = _rng(world, "cities", k)
    name = world.name("country", k)
    cities = [world.name("city", c) for c in world.listed_cities(k)]
    if len(cities) > 1:
        text = _pick(rng, world, _COUNTRY_CITIES).format(k=name, cs=_join(cities))
    else:
        text = f"{cities[0]} is another city of {name}."
    return Document(world.doc_id("country", k, "cities"), f"Cities of {name}", _sentences([text]))


def org_staff(world: World, o: int) -> Document:
    """Some employees of an organization."""
    rng = _rng(world, "staff", o)
    name = world.name("org", o)
    staff = _join([world.name("person", p) for p in world.listed_employees(o)])
    return Document(
        world.doc_id("org", o, "staff"),
        f"Staff of {name}",
        _sentences([_pick(rng, world, _EMPLOYEES).format(o=name, ps=staff)]),
    )


def uni_alumni(world: World, u: int) -> Document:
    """Some alumni of a university."""
    rng = _rng(world, "alumni", u)
    name = ref(world.name("uni", u))
    alumni = _join([world.name("person", p) for p in world.listed_alumni(u)])
    return Document(
        world.doc_id("uni", u, "alumni"),
        f"Alumni of {name}",
        _sentences([_pick(rng, world, _ALUMNI).format(u=name, ps=alumni)]),
    )


def mention_doc(world: World, m: int) -> Document:
    """A passage that names people, places and works but states none of their facts."""
    rng = _rng(world, "mention", m)
    sz = world.sizes
    p1, p2 = rng.randrange(sz.people), rng.randrange(sz.people)
    n1, n2 = world.name("person", p1), world.name("person", p2)
    s1 = world.surname(p1)
    y = rng.randrange(1860, 2020)
    c = world.name("city", rng.randrange(sz.cities))
    kind = rng.randrange(5)
    if kind == 0:
        title = f"Correspondence of {n1} and {n2}"
        text = (
            f"{n1} and {n2} exchanged letters for many years. The letters, written from {y} onwards, "
            f"discuss {rng.choice(_TOPICS)}. {s1} kept copies of most of them."
        )
    elif kind == 1:
        w = world.name("work", rng.randrange(sz.works))
        title = f"{y} {c} festival"
        text = (
            f"The {y} festival in {c} featured a programme including {w}. {n1} gave a talk at the event, "
            f"and {n2} chaired one of the evening sessions."
        )
    elif kind == 2:
        u = ref(world.name("uni", rng.randrange(sz.unis)))
        title = f"{n1} lecture at {u}"
        text = (
            f"In {y}, {n1} gave a public lecture at {u} on {rng.choice(_TOPICS)}. "
            f"The lecture was later printed, with a preface by {n2}."
        )
    elif kind == 3:
        w = world.name("work", rng.randrange(sz.works))
        title = f"Reception of {w}"
        text = (
            f"{w} drew mixed responses. {n1} praised its structure in a review, while {n2} "
            f"found it overlong. A later discussion in {c} revived interest in it."
        )
    else:
        o = world.name("org", rng.randrange(sz.orgs))
        title = f"Visit of {n1} to {c}"
        text = (
            f"{n1} visited {c} in {y}, meeting representatives of {o}. "
            f"The visit was arranged by {n2} and lasted several weeks."
        )
    return Document(f"mention{m}", title, text)


def iter_documents(world: World) -> Iterator[Document]:
    """All passages of the world, in corpus order, one at a time.

    Yields:
        Exactly ``world.sizes.passages`` documents.
    """
    sz = world.sizes
    for k in range(sz.countries):
        yield country_doc(world, k)
        yield country_cities(world, k)
    for c in range(sz.cities):
        yield city_doc(world, c)
        yield city_people(world, c)
    for u in range(sz.unis):
        yield uni_doc(world, u)
        yield uni_alumni(world, u)
    for o in range(sz.orgs):
        yield org_doc(world, o)
        yield org_staff(world, o)
    for p in range(sz.people):
        yield from person_docs(world, p)
    for w in range(sz.works):
        yield work_doc(world, w)
    for m in range(sz.mentions):
        yield mention_doc(world, m)


_RENDER = {
    ("country", None): country_doc,
    ("country", "cities"): country_cities,
    ("city", None): city_doc,
    ("city", "people"): city_people,
    ("uni", None): uni_doc,
    ("uni", "alumni"): uni_alumni,
    ("org", None): org_doc,
    ("org", "staff"): org_staff,
    ("person", "bio"): person_bio,
    ("person", "career"): person_career,
    ("person", "personal"): person_personal,
    ("person", "works"): person_works,
    ("work", None): work_doc,
    ("mention", None): mention_doc,
}
_ID = re.compile(r"(person|city|country|org|uni|work|mention)(\d+)(?:-([a-z]+))?")


def document(world: World, doc_id: str) -> Document:
    """Render the single passage with id ``doc_id`` (for tests and debugging).

    Raises:
        ValueError: If the id does not name a passage of this world.
    """
    m = _ID.fullmatch(doc_id)
    if not m or (m.group(1), m.group(3)) not in _RENDER:
        raise ValueError(f"not a passage id of a generated world: {doc_id!r}")
    etype, i, part = m.group(1), int(m.group(2)), m.group(3)
    limit = world.sizes.mentions if etype == "mention" else world.count(etype)
    missing = (part == "personal" and world.spouse[i] < 0) if i < limit else True
    if part == "works" and i < limit and not (world.listed_works(i) or world.founded_orgs(i)):
        missing = True
    if missing:
        raise ValueError(f"no passage {doc_id!r} in this world")
    return _RENDER[(etype, part)](world, i)
