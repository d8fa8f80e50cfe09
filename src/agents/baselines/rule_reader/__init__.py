"""The rule-based reader: a small, documented answer-candidate extractor over retrieved documents.

Reference agents and the macro-action controller (:mod:`agents.sb3`) answer with a span taken
from what they retrieved. This module finds those spans and ranks them with a handful of
transparent rules; nothing is learned.

Question analysis (:func:`analyse_question`):
    * *entities*: capitalised n-grams of the question (see :func:`capitalized_spans`);
    * *relation keywords*: the other content words, compared by their first five letters and
      expanded with a small English lexicon of relation synonyms (:data:`RELATION_GROUPS`:
      *studied* ~ *graduated* ~ *alumnus*, *married* ~ *spouse*, ...);
    * *answer type*: the first type trigger in question order (:data:`ANSWER_TYPES`; "Which
      city is home to the university where ..." asks for a city), ``person`` for *who*,
      ``number`` for *when* / *what year* / *how many*;
    * *comparison*: two options ("..., A or B?", "Between A and B, ...?", "Are A and B ...
      the same ...?") and what is compared (earliest / latest year, or same value: yes/no).

Candidates (ordinary questions):
    * capitalised n-grams of document titles and texts (lower-case connectors such as *of*,
      *de*, *van* may join capitalised words; a sentence-initial word that also occurs in lower
      case in the question or documents, or is a common sentence opener, is dropped),
    * numbers, and the titles of the retrieved documents,
    * for ``occupation`` questions, the one- or two-word noun phrase after *is a/an*, *as a/an*;
      for ``industry`` questions, the word before *company*, *firm*, *business*.

    A candidate whose normalised text occurs in the question or in one of the ``exclude``
    strings (the controller passes the entities it already searched for) is dropped: the answer
    is rarely a phrase of the question, and a bridge entity already followed up is not the
    final answer.

Score of a candidate (higher is better)::

    score = w_proximity * proximity + w_type * type_fit + w_support * min(support, 3) / 3
            + w_recent * recent + w_rank * rank_score + w_number * number_match + w_about * about

* ``proximity``: max over the candidate's mentions of ``1 / (1 + d)``, ``d`` the distance in
  tokens to the nearest relation keyword in the same sentence (0 if there is none).
* ``type_fit``: how well the candidate fits the answer type: 1 if the candidate's own words
  carry a cue of the type (*University*, *Laboratories*) or a person-shaped name for ``person``,
  else ``1 / (1 + d)`` to the nearest type cue word in the same sentence (*city*, *citizen*).
* ``support``: how many retrieved documents mention it; ``recent``: a document of the latest
  search mentions it; ``rank_score``: ``1 / (1 + r)`` for the best position ``r`` of a document
  mentioning it in the retrieval order.
* ``about``: 1 if a document about the subject of the current hop mentions the candidate: a
  document titled with the entity searched for last (the last ``exclude`` string), or before
  any follow-up search, with one of the question's entities.
* ``number_match``: +1 when the question asks for a number and the candidate is one, or asks for
  something else and it is not; -1 otherwise.

``mode="bridge"`` ranks the entities to search for next instead: numbers are dropped and the
type term is left out (a bridge entity has the type of an intermediate hop, not the answer's).

Comparison questions are resolved rather than ranked: each option's value (its year, or the
entity of the compared type, e.g. its country) is read from a document about the option (titled
with it, else the best-scoring mention), then the earlier / later option or ``yes`` / ``no`` is
the answer. Its ``support`` is the number of options whose value was found.
"""

from agents.baselines.rule_reader.documents import (
    Candidate,
    ExtractorWeights,
    closed_book_guess,
    closed_book_guess_from,
    extract_candidates,
)
from agents.baselines.rule_reader.question import (
    ANSWER_TYPES,
    RELATION_GROUPS,
    AnswerType,
    QuestionAnalysis,
    analyse_question,
    asks_for_number,
    capitalized_spans,
    estimate_hops,
    question_options,
    relation_keywords,
    tokenize,
)

__all__ = [
    "ANSWER_TYPES",
    "RELATION_GROUPS",
    "AnswerType",
    "Candidate",
    "ExtractorWeights",
    "QuestionAnalysis",
    "analyse_question",
    "asks_for_number",
    "capitalized_spans",
    "closed_book_guess",
    "closed_book_guess_from",
    "estimate_hops",
    "extract_candidates",
    "question_options",
    "relation_keywords",
    "tokenize",
]
