"""Scripted reference agents that need no model: the gold-decomposition oracle and a random agent.

Both implement :class:`agents.baselines.Agent` and run through :func:`agents.baselines.run_agent`
(the same environment, batched retrieval and scoring as every other agent).

Oracle rule (the upper bound, and the source of cold-start SFT demonstrations):

1. The hops are the example's gold decomposition (sub-questions with earlier intermediate
   answers already filled in). An example without one whose metadata names the titles of its
   gold evidence (``evidence_titles``, which ``searchenv convert`` writes for HotpotQA; or its
   ``supporting_facts``) has one *lookup* hop per evidence document: the query is the title, and
   the hop is reached when that document was retrieved. So on HotpotQA-style data the oracle
   fetches every supporting paragraph, one search each, and is an upper bound on what a search
   policy can retrieve. Any other example is a single hop: the question itself, its first gold
   answer and its gold evidence.
2. Turn ``t`` searches hop ``t``'s sub-question verbatim, after a ``<think>`` that states the
   previous hop's answer and what is needed next. Under a protocol with several queries per
   turn (``multi-query``) one turn searches consecutive hops together while none needs the
   answer of another in the same turn (a comparison's two lookups; never a bridge's next hop).
3. After each search, the hop counts as *reached* if at least one of its gold evidence
   documents has been retrieved so far in the episode (each of a hop's evidence documents
   states its fact on its own: :attr:`SubQuestion.evidence_ids`); a hop without evidence ids is
   reached when its answer occurs, as whole words, in the retrieved text. The single hop of an
   example without a decomposition or evidence titles has the example's whole evidence chain as
   its evidence: all of it must have been retrieved. The answer is the gold one only if every
   hop was reached.
4. When every hop is reached it answers the first gold answer. When a hop is not reached it
   stops and answers the last intermediate answer it did reach; if not even the first hop was
   reached (or the hops are lookups, which have no intermediate answers) it answers ``unknown``
   (:data:`ABSTAIN`). When only one turn of the budget is left it answers in the same way with
   what it has reached so far.

With ``plan=True`` (the ``oracle-plan`` agent) the reasoning says the whole chain in its first
turn, each later sub-question referring to an earlier hop's answer as ``#k`` (``Plan (3 steps):
1. Who was X married to? 2. Which organization did #1 work for? 3. Who founded #2?``), then each
turn names its step (``#1 is Y. Step 2 of 3: ...``) and the last one says why it stops; a
comparison's last turn sets the two values side by side and says which is earlier or whether they
are the same. How many hops a question takes is then decided once, reading the question, and
written where every later turn can read it. The searches, the answers and the rule above do not
change; a lookup hop, or a turn that searches several hops, is written as without a plan.

Every oracle turn is a valid protocol turn ``<think> .. </think>`` followed by one
``<search> .. </search>`` or ``<answer> .. </answer>``.

Under protocols with more actions the scripted agents write that protocol's turns
(:func:`answer_turn`): with ``browse`` a hop counts as reached only once a gold evidence
document of it was *opened* (the oracle opens the hop's shown evidence after each search, so
its demonstrations teach opening), and the heuristic opens the top new hit of each search
before it reads; with ``arena`` the final turn cites documents by their episode numbers
(the oracle cites the gold evidence it was shown; the heuristic the documents that mention
its answer) and moves its reasoning into ``<analysis>``. Under ``tools`` (and ``tools-browse``)
each tag turn is said as a tool call (:meth:`~searchenv.protocols.Protocol.from_tags`: the
``<think>`` text, then ``<tool_call>{"name": "search", ...}</tool_call>``), so the oracle's
demonstrations teach the calls.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agents.baselines.episode import EpisodeState, Turn
from searchenv.metrics import answer_in_text, normalize_answer
from searchenv.protocols import ActionProtocol, sanitize
from searchenv.tasks import QAExample, SubQuestion

#: What the oracle answers when it reached no hop at all.
ABSTAIN = "unknown"

_WORD = re.compile(r"\w+", re.UNICODE)


def evidence_titles(example: QAExample) -> tuple[str, ...] | None:
    """The titles of the example's gold evidence documents, in ``evidence_ids`` order, where its metadata says.

    Read from ``metadata["evidence_titles"]`` (written by ``searchenv convert`` for HotpotQA and
    2WikiMultiHopQA), or for files converted before that from ``metadata["supporting_facts"]``
    (the distinct supporting titles in order, less ``unmapped_supporting_titles``) when there
    are as many as evidence ids.

    Returns:
        One non-empty title per evidence id, or None.
    """
    meta = example.metadata
    titles = meta.get("evidence_titles")
    if not isinstance(titles, list | tuple):
        facts = meta.get("supporting_facts")
        unmapped = meta.get("unmapped_supporting_titles") or ()
        if not isinstance(facts, list) or not isinstance(unmapped, list | tuple):
            return None
        titles = list(dict.fromkeys(
            f[0] for f in facts if isinstance(f, list | tuple) and f and isinstance(f[0], str) and f[0] not in unmapped
        ))
    if len(titles) != len(example.evidence_ids) or not all(isinstance(t, str) and t.strip() for t in titles):
        return None
    return tuple(titles)


@dataclass(frozen=True)
class Lookup:
    """A hop that looks up a gold evidence document by its title: it has no answer of its own.

    Attributes:
        question: The document's title (what the oracle searches).
        evidence_ids: The document.
        answer: Always empty (a lookup reaches no intermediate answer).
    """

    question: str
    evidence_ids: tuple[str, ...]
    answer: str = ""


#: A hop of the oracle: a sub-question of the gold decomposition, or a title lookup.
Hop = SubQuestion | Lookup


def oracle_hops(example: QAExample) -> tuple[Hop, ...]:
    """The hops the oracle follows: the gold decomposition, a lookup per gold evidence title, or the question.

    A lookup hop (:class:`Lookup`) searches an evidence document's title; its evidence is that
    document.

    Args:
        example: The question.

    Returns:
        Sub-questions in hop order.
    """
    if example.decomposition:
        return example.decomposition
    titles = evidence_titles(example) if example.evidence_ids else None
    if titles is not None:
        return tuple(Lookup(t, (e,)) for t, e in zip(titles, example.evidence_ids, strict=True))
    return (SubQuestion(example.question, example.answers[0], tuple(example.evidence_ids)),)


def is_lookup(hop: Hop) -> bool:
    """Whether ``hop`` looks up a gold evidence title (:func:`oracle_hops`): it has no answer of its own."""
    return isinstance(hop, Lookup)


def _reached_answer(hops: Sequence[Hop], done: int) -> str:
    """The intermediate answer of the last of the first ``done`` hops, or :data:`ABSTAIN` (none, or a lookup)."""
    return hops[done - 1].answer if done >= 1 and not is_lookup(hops[done - 1]) else ABSTAIN


def _clean(text: str) -> str:
    return " ".join(sanitize(text).split())


def answer_turn(ep: EpisodeState, reasoning: str, answer: str, cite: Sequence[str] = ()) -> str:
    """A final turn in the episode's protocol.

    Args:
        ep: The episode.
        reasoning: One or two sentences of reasoning (``<think>``, or ``<analysis>`` under ``arena``).
        answer: The answer.
        cite: Document ids the answer relies on (cited by number where the protocol cites).

    Returns:
        The turn text.
    """
    if "relevance" in ep.protocol.tags:
        numbers = sorted({n for n in (ep.doc_number(d) for d in cite) if n is not None})
        listed = ", ".join(map(str, numbers)) or "none"
        return (
            f"<relevance> {listed} </relevance>\n<analysis> {reasoning} </analysis>\n"
            f"<answer> {_clean(answer)} </answer>"
        )
    return f"<think> {reasoning} </think>\n<answer> {_clean(answer)} </answer>"


def open_turn(number: int, reason: str) -> str:
    """An ``<open>`` turn (``browse``) for document ``number``."""
    return f"<think> {reason} </think>\n<open> {number} </open>"


class _ScriptedAgent:
    """Turns written by rules, one episode at a time (:meth:`turn`), in the protocol's own format.

    The round ``seed`` of :meth:`act` is unused: a scripted agent is deterministic, or (the random
    agent) seeds each turn from its own seed and the episode's.
    """

    def adapt_protocol(self, protocol: ActionProtocol) -> ActionProtocol:
        """The protocol unchanged."""
        return protocol

    def act(self, episodes: Sequence[EpisodeState], *, seed: int) -> list[Turn]:
        """One turn per episode, in the episode's protocol (tag turns become tool calls under ``tools``)."""
        return [Turn(ep.protocol.from_tags(self.turn(ep))) for ep in episodes]

    def turn(self, ep: EpisodeState) -> str:
        """The next turn for one episode."""
        raise NotImplementedError


class OracleAgent(_ScriptedAgent):
    """Follows the gold decomposition; answers gold only when every hop's evidence was retrieved.

    See the module docstring for the exact rule.

    Args:
        plan: Write the chain of sub-questions in the first turn and number each step (``oracle-plan``).
    """

    max_turns: int | None = None

    def __init__(self, plan: bool = False) -> None:
        self.plan = plan
        self.name = "oracle-plan" if plan else "oracle"

    @staticmethod
    def _reached(hop: Hop, ep: EpisodeState) -> bool:
        opening = ep.protocol.can_open
        hits = ep.read_hits()
        if hop.evidence_ids:
            ids = set(ep.opened_ids()) if opening else {h.doc_id for h in hits}
            if not ep.example.decomposition:  # the whole question: its evidence chain, all of it
                return all(e in ids for e in hop.evidence_ids)
            return any(e in ids for e in hop.evidence_ids)
        if opening:
            hits = [h for h in hits if h.doc_id in set(ep.opened_ids())]
        return any(answer_in_text(f"{h.title} {h.text}", [hop.answer]) for h in hits)

    @staticmethod
    def _to_open(hop: Hop, ep: EpisodeState) -> int | None:
        """The number of a shown, unopened gold evidence document of ``hop`` (``browse``)."""
        opened = set(ep.opened_ids())
        if ep.example.decomposition and any(e in opened for e in hop.evidence_ids):
            return None
        for e in hop.evidence_ids:
            n = ep.doc_number(e)
            if e not in opened and n is not None:
                return n
        if not hop.evidence_ids:  # no gold ids: the first shown document naming the answer
            for h in ep.retrieved_hits():
                n = ep.doc_number(h.doc_id)
                if h.doc_id not in opened and n is not None and answer_in_text(f"{h.title} {h.text}", [hop.answer]):
                    return n
        return None

    @staticmethod
    def _evidence(ep: EpisodeState) -> list[str]:
        """Gold evidence documents the episode has shown (what the oracle cites)."""
        ids = {h.doc_id for h in ep.retrieved_hits()}
        return [e for e in ep.example.evidence_ids if e in ids]

    def turn(self, ep: EpisodeState) -> str:
        """The oracle's next turn for one episode."""
        hops = oracle_hops(ep.example)
        waves = [len(s.info.get("queries") or ()) for s in ep.steps if s.info.get("action_type") == "search"]
        searched = sum(waves)  # hops searched so far, in order
        last = range(searched - waves[-1], searched) if waves else range(0)
        if ep.protocol.can_open and ep.turns_left > 1:
            for h in last:
                number = self._to_open(hops[h], ep)
                if number is not None:
                    return open_turn(number, f'Doc {number} may answer "{_clean(hops[h].question)}"; '
                                     "I read it in full.")
        for h in last:
            if not self._reached(hops[h], ep):
                best = _reached_answer(hops, h)
                missed = (f'The information has no document on "{_clean(hops[h].question)}".' if is_lookup(hops[h])
                          else f'The information does not answer "{_clean(hops[h].question)}".')
                return answer_turn(ep, f"{missed} The furthest I got is: {_clean(best)}.", best, self._evidence(ep))
        planned = self.plan and len(hops) > 0 and not any(is_lookup(h) for h in hops) and all(w == 1 for w in waves)
        if searched >= len(hops):
            final, gold = hops[-1], ep.example.answers[0]
            if planned and (read := _plan_end(ep, hops)):
                return answer_turn(ep, f"{read}, so the answer is {_clean(gold)}.", gold, self._evidence(ep))
            read = (f"I have read about {'; '.join(_clean(h.question) for h in hops)}." if is_lookup(final) else
                    f'The information says the answer to "{_clean(final.question)}" is {_clean(final.answer)}.')
            if ep.example.type == "comparison" and len(hops) == 2 and not is_lookup(hops[0]):
                # both values side by side where the comparison is made, not one of them turns back
                read += f' Before, "{_clean(hops[0].question)}" was {_clean(hops[0].answer)}.'

            return answer_turn(ep, f"{read} So the answer to the question is {_clean(gold)}.", gold,
                               self._evidence(ep))
        if ep.turns_left <= 1:
            best = _reached_answer(hops, searched)  # reached, or answered above
            return answer_turn(
                ep, f"I have no turns left to search; the furthest I got is: {_clean(best)}.", best, self._evidence(ep)
            )
        wave = self._next_wave(hops, searched, ep.protocol.max_queries)
        nxt = hops[searched]
        if planned and len(wave) == 1:
            step = f"Step {searched + 1} of {len(hops)}: {_clean(nxt.question)}"
            found = _clean(hops[searched - 1].answer)
            lead = f"{_plan(ep, hops)} {step}" if searched == 0 else f"#{searched} is {found}. {step}"
            return f"<think> {lead} </think>\n<search> {_clean(nxt.question)} </search>"
        need = "; and ".join(_clean(h.question) for h in wave)
        if searched == 0 and is_lookup(nxt):
            lead = f"To answer this I need to read about: {need}"
        elif searched == 0:
            lead = f"To answer this I first need: {need}" if len(hops) > 1 else f"I need to look this up: {need}"
        elif is_lookup(prev := hops[searched - 1]):
            lead = f'I have found "{_clean(prev.question)}". Next I need to read about: {need}'
        else:
            lead = (
                f'The information says the answer to "{_clean(prev.question)}" is {_clean(prev.answer)}. '
                f"Next I need: {need}"
            )
        if len(wave) == 1:
            return f"<think> {lead} </think>\n<search> {_clean(nxt.question)} </search>"
        lines = "\n".join(_clean(h.question) for h in wave)
        return f"<think> {lead} </think>\n<search>\n{lines}\n</search>"

    @staticmethod
    def _next_wave(hops: Sequence[Hop], start: int, max_queries: int) -> list[Hop]:
        """The hops to search in one turn: from ``start``, while none needs another's answer (RAG-R1).

        A hop needs an earlier one of the same turn when that hop's answer occurs in its question
        (the next hop of a bridge names the bridge entity); the hops of a comparison do not, so a
        protocol with several queries per turn searches them together.
        """
        wave = [hops[start]]
        for h in hops[start + 1 :]:
            if len(wave) >= max_queries or any(w.answer and answer_in_text(h.question, [w.answer]) for w in wave):
                break
            wave.append(h)
        return wave


def _plan(ep: EpisodeState, hops: Sequence[Hop]) -> str:
    """The chain of sub-questions, each earlier answer it names written ``#k``: ``Plan (n steps): 1. ...``."""
    steps = []
    for i, hop in enumerate(hops):
        text = _clean(hop.question)
        for j in range(i):  # the latest hop first: a later answer may contain an earlier one
            answer = _clean(hops[i - 1 - j].answer)
            if answer and answer in text:
                text = text.replace(answer, f"#{i - j}")
        steps.append(f"{i + 1}. {text}")
    then = ", then compare" if ep.example.type == "comparison" and len(hops) == 2 else ""
    return f"Plan ({len(hops)} step{'s' if len(hops) > 1 else ''}{then}): {' '.join(steps)}"


def _plan_end(ep: EpisodeState, hops: Sequence[Hop]) -> str | None:
    """The reasoning of a planned last turn (before ``, so the answer is ...``), or None if it cannot say why."""
    n = len(hops)
    if ep.example.type != "comparison":
        return f"#{n} is {_clean(hops[-1].answer)}. That was step {n} of {n}"
    kind = str(ep.example.metadata.get("comparison", ""))
    if n != 2 or not kind:
        return None
    a, b = _clean(hops[0].answer), _clean(hops[1].answer)
    read = f"#1 is {a} and #2 is {b}"
    if kind.startswith("same"):
        return f"{read}; they are {'the same' if normalize_answer(a) == normalize_answer(b) else 'different'}"
    if kind.endswith("_first") and a.isdigit() and b.isdigit() and a != b:
        return f"{read}; {min(a, b, key=int)} is earlier"
    return None


@dataclass
class RandomAgent(_ScriptedAgent):
    """Seeded random turns: searches made of question words, answers that are random document spans.

    Each turn, the agent answers with probability ``p_answer`` once something was retrieved (and
    always on the last turn of the budget), with a span of 1-3 words from a random retrieved
    document (from the question when nothing was retrieved); otherwise it searches 1-4 words of
    the question, in question order. The generator of each turn is seeded by
    ``(seed, episode seed, turn)``, so runs repeat exactly whatever the batch size.

    Attributes:
        seed: The agent's seed.
        p_answer: Probability of answering once documents have been retrieved.
    """

    seed: int = 0
    p_answer: float = 0.4
    name: str = "random"
    max_turns: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.p_answer <= 1.0:
            raise ValueError(f"p_answer must be in [0, 1], got {self.p_answer!r}")

    def turn(self, ep: EpisodeState) -> str:
        """The next random turn for one episode."""
        rng = np.random.default_rng([self.seed, ep.seed, ep.turn])
        words = _WORD.findall(ep.example.question) or ["question"]
        docs = ep.retrieved_hits()
        if ep.turns_left <= 1 or (docs and rng.random() < self.p_answer):
            source = _WORD.findall(docs[int(rng.integers(len(docs)))].text) if docs else words
            source = source or words
            length = int(rng.integers(1, 4))
            start = int(rng.integers(max(1, len(source) - length + 1)))
            return f"<answer> {' '.join(source[start : start + length])} </answer>"
        k = int(rng.integers(1, min(4, len(words)) + 1))
        picked = sorted(rng.choice(len(words), size=k, replace=False).tolist())
        return f"<search> {' '.join(words[i] for i in picked)} </search>"


@dataclass
class HeuristicAgent(_ScriptedAgent):
    """The strongest non-learned baseline: search, read with rules, follow bridges, answer.

    It reads only the question and what the environment returned (never the gold data):

    1. Turn 1 searches the question as asked.
    2. A comparison question (two options, :func:`agents.baselines.rule_reader.analyse_question`) then searches
       each option not yet searched, with the question's relation words (all of them in one turn
       under a protocol with several queries per turn).
    3. Otherwise, while fewer searches were made than :func:`agents.baselines.rule_reader.estimate_hops` says the
       question needs, it searches the best new entity of the latest search
       (:func:`agents.baselines.rule_reader.extract_candidates` in ``bridge`` mode) with the question's relation
       words; it stops early when the latest search names no new entity.
    4. It answers with the best candidate the rule-based reader extracts from everything
       retrieved (``answer`` mode; a comparison is resolved from the options' values), or the
       closed-book guess when there is none. It always answers on the last turn of the budget.

    This is the pipeline of the SB3 controller's fixed policies, with the number of searches
    chosen by a rule instead of a learned controller.

    Attributes:
        max_hops: Cap on the searches a bridge question gets.
    """

    max_hops: int = 4
    name: str = "heuristic"
    max_turns: int | None = None

    @staticmethod
    def _query(ep: EpisodeState, text: str) -> str:
        limit = int(getattr(ep.protocol, "max_query_chars", 300))
        return " ".join(sanitize(text).split())[:limit].strip() or "unknown"

    def turn(self, ep: EpisodeState) -> str:
        """The next turn for one episode."""
        from agents.baselines.rule_reader import analyse_question, closed_book_guess, estimate_hops, extract_candidates

        question = ep.example.question
        searched: list[str] = ep.memory.setdefault("searched_entities", [])
        if ep.turn == 0 and ep.turns_left > 1:
            return f"<search> {self._query(ep, question)} </search>"
        qa = analyse_question(question)
        hits = ep.read_hits()
        searches = [s for s in ep.steps if s.info.get("action_type") == "search"]
        recent = [h.doc_id for per_query in searches[-1].hits for h in per_query] if searches else []
        if ep.protocol.can_open and ep.steps and ep.steps[-1].info.get("action_type") == "search" and ep.turns_left > 1:
            opened = set(ep.opened_ids())
            top = next((d for d in recent if d not in opened), None)
            number = ep.doc_number(top) if top is not None else None
            if number is not None:
                return open_turn(number, f"Doc {number} is the top result; I read it in full.")
        relations = " ".join(qa.relation_words)
        if ep.turns_left > 1:
            target: str | None = None
            if qa.options:
                done = {normalize_answer(e) for e in searched}
                todo = [o for o in qa.options if normalize_answer(o) not in done]
                target = todo[0] if todo else None
                if len(todo) > 1 and ep.protocol.max_queries > 1:  # multi-query: the options in one turn
                    batch = todo[: ep.protocol.max_queries]
                    searched.extend(batch)
                    lines = "\n".join(self._query(ep, f"{o} {relations}") for o in batch)
                    return f"<search>\n{lines}\n</search>"
            elif len(searched) + 1 < estimate_hops(question, self.max_hops) and hits:
                bridges = extract_candidates(
                    question, hits, recent_ids=recent, exclude=searched, limit=8, mode="bridge", hop=len(searched)
                )
                target = next((c.text for c in bridges if c.recent), None)
            if target is not None:
                searched.append(target)
                return f"<search> {self._query(ep, f'{target} {relations}')} </search>"
        best = extract_candidates(question, hits, recent_ids=recent, exclude=searched, limit=1) if hits else []
        answer = best[0].text if best else closed_book_guess(question)
        if "relevance" in ep.protocol.tags:
            cite = [h.doc_id for h in hits if answer_in_text(f"{h.title} {h.text}", [answer])][:2]
            for entity in searched:
                cite += [h.doc_id for h in hits if answer_in_text(f"{h.title} {h.text}", [entity])][:1]
            return answer_turn(ep, f"The documents point to {_clean(answer) or ABSTAIN}.", answer or ABSTAIN, cite)
        return f"<answer> {_clean(answer) or ABSTAIN} </answer>"
