"""Benchmark suites over public data, and the metric card of a run (``searchenv bench``).

A *suite* is a fixed list of question sets asked against one corpus, in the files' published
layouts (docs/reference/benchmarks.md says where each comes from):

``search-r1``
    Search-R1's seven QA sets in FlashRAG's JSONL layout (``nq/test.jsonl``,
    ``triviaqa/test.jsonl``, ``popqa/test.jsonl``, ``hotpotqa/dev.jsonl``,
    ``2wikimultihopqa/dev.jsonl``, ``musique/dev.jsonl``, ``bamboogle/test.jsonl``) over the
    2018 Wikipedia corpus ``wiki-18.jsonl`` (``{"id", "contents"}`` per line).
``browsecomp-plus``
    BrowseComp-Plus: the decrypted queries ``browsecomp_plus_decrypted.jsonl`` (``query_id``,
    ``query``, ``answer``), the corpus ``corpus.jsonl`` (``docid``, ``text``) and the evidence
    judgements ``topics-qrels/qrel_evidence.txt`` (TREC qrels).

:func:`run_bench` builds (or reuses) one index of the corpus, runs every set with the same agent
and settings through :func:`agents.evaluation.evaluate.evaluate` (finished episodes are saved as they
complete, so a killed run continues where it stopped), judges the answers when a judge is given
(:class:`agents.evaluation.judges.ChoiceAnswerJudge`; verdicts saved too) and returns the **metric card**.
What a rerun reads back is checked, not trusted: saved episodes are scored again from their answers
(:func:`agents.evaluation.evaluate.evaluate`), a saved verdict must agree with its method and with
what can be recomputed (:func:`judge_set`), and no file or folder under ``out`` may be a symbolic
link (nothing outside ``out`` is written). The card holds,
per set and averaged over the sets (the mean of the set means, as the papers' "Avg." column),

==================  ===============================================================================
``em``              exact match after SQuAD normalisation (:func:`searchenv.metrics.exact_match`)
``cover_em``        a normalised gold answer is a substring of the normalised prediction
                    (FlashRAG's and R1-Searcher's "cover EM"/"Acc"; rewards hedged answers)
``f1``              token F1 (:func:`searchenv.metrics.f1_score`)
``judge_acc``       share judged correct by the judge, of the answers it judged (None without a judge);
                    ``judge_failures`` counts the answers whose judgement failed (the judge model's
                    request failed: not judged, asked again by a rerun)
``searches``        search turns per question
``turns``           turns per question
``answered``        share of questions answered within the turn budget
``gen_tokens``      tokens the model generated per question (0 for scripted agents)
``read_tokens``     tokens of the retrieved text the agent was shown per question, counted with the
                    model's tokenizer when it has one, else as words (``read_token_unit``)
``invalid_turns``   malformed turns per question; ``invalid_by_code`` counts them by
                    :class:`searchenv.protocols.Invalid` code, ``unanswered`` the questions that
                    ran out of turns, ``failed`` the episodes whose model requests failed (not scored)
==================  ===============================================================================

and the settings that make two cards comparable (:data:`COMPARABILITY`): corpus fingerprint,
index kind and hash, retriever, top-k, turns, protocol, model, sampling, judge and code
version. :func:`compare_cards` names every setting in which two cards differ. Published
reference rows (:data:`PUBLISHED`) are printed beside the measured ones, marked as published,
not measured here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.evaluation.bench_checks import check_decoys, judge_pool, judge_set
from agents.evaluation.resume import generation_settings
from agents.evaluation.summary import mean_or_none as _mean
from searchenv.corpus import atomic_write_lines
from searchenv.errors import BenchDataError
from searchenv.utils.files import refuse_link

CARD_VERSION = 1


@dataclass(frozen=True)
class BenchSet:
    """One question set of a suite.

    Attributes:
        name: Short name (``nq``).
        path: The file, relative to the suite's data folder.
        layout: ``flashrag`` (a FlashRAG QA JSONL file) or ``browsecomp-plus`` (decrypted queries).
        split: The split the file holds (as the papers report it).
    """

    name: str
    path: str
    layout: str
    split: str


@dataclass(frozen=True)
class Suite:
    """A benchmark suite: question sets asked against one corpus.

    Attributes:
        name: The suite's name (``searchenv bench NAME``).
        sets: Its question sets, in the order they are run and shown.
        corpus: The corpus file, relative to the data folder.
        qrels: The relevance judgements file, relative to the data folder (None: none).
        description: One line for ``--help`` and the card.
    """

    name: str
    sets: tuple[BenchSet, ...]
    corpus: str
    qrels: str | None
    description: str


SUITES: dict[str, Suite] = {
    "search-r1": Suite(
        "search-r1",
        tuple(BenchSet(name, f"{name}/{split}.jsonl", "flashrag", split) for name, split in (
            ("nq", "test"), ("triviaqa", "test"), ("popqa", "test"), ("hotpotqa", "dev"),
            ("2wikimultihopqa", "dev"), ("musique", "dev"), ("bamboogle", "test"))),
        "wiki-18.jsonl",
        None,
        "Search-R1's seven QA sets (FlashRAG JSONL) over the 2018 Wikipedia dump (wiki-18.jsonl)",
    ),
    "browsecomp-plus": Suite(
        "browsecomp-plus",
        (BenchSet("browsecomp-plus", "browsecomp_plus_decrypted.jsonl", "browsecomp-plus", "test"),),
        "corpus.jsonl",
        "topics-qrels/qrel_evidence.txt",
        "BrowseComp-Plus: 830 decrypted queries over its fixed corpus, evidence from its qrels",
    ),
}

#: Settings that make two cards comparable (:func:`compare_cards` names those that differ).
COMPARABILITY = ("suite", "sets", "corpus_fingerprint", "index_kind", "index_hash", "retriever", "top_k",
                 "max_turns", "protocol", "max_doc_chars", "agent", "model", "sampling", "judge", "code_version")

#: Metrics of a set row (key, column title, format), in card order.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("em", "EM", "{:.3f}"),
    ("cover_em", "Cover EM", "{:.3f}"),
    ("f1", "F1", "{:.3f}"),
    ("judge_acc", "Judge acc", "{:.3f}"),
    ("searches", "Searches/q", "{:.2f}"),
    ("turns", "Turns/q", "{:.2f}"),
    ("answered", "Answered", "{:.3f}"),
    ("gen_tokens", "Gen tok/q", "{:.1f}"),
    ("read_tokens", "Read tok/q", "{:.1f}"),
    ("invalid_turns", "Invalid/q", "{:.2f}"),
)

_SEARCH_R1_SOURCE = ("Jin et al., Search-R1: Training LLMs to Reason and Leverage Search Engines with Reinforcement "
                     "Learning, arXiv:2503.09516, main results table (Search-R1-base, PPO); the same row is quoted "
                     "by independent reproductions. The 3B rows differ between arXiv versions (3B-Base average "
                     "0.312 in one, 0.303 in another), so they are left out: check the version you cite")
_SEARCH_R1_SETTINGS = ("EM; 2018 Wikipedia dump; E5 retriever, 3 passages per search; trained on the NQ and "
                       "HotpotQA training sets; test sets of NQ, TriviaQA, PopQA, Bamboogle and dev sets of "
                       "HotpotQA, 2WikiMultiHopQA, MuSiQue")

#: Published reference rows per suite: printed beside ours, never mixed into our numbers. Only rows
#: whose numbers we are sure of are listed (docs/reference/benchmarks.md says which were left out and why).
PUBLISHED: dict[str, tuple[dict[str, Any], ...]] = {
    "search-r1": (
        {"name": "Search-R1 (Qwen2.5-7B-Base, PPO)", "metric": "em",
         "values": {"nq": 0.480, "triviaqa": 0.638, "popqa": 0.457, "hotpotqa": 0.433, "2wikimultihopqa": 0.382,
                    "musique": 0.196, "bamboogle": 0.432},
         "average": 0.431, "source": _SEARCH_R1_SOURCE, "settings": _SEARCH_R1_SETTINGS},
    ),
    "browsecomp-plus": (),
}


def suite_files(suite: Suite, data: str | os.PathLike[str], *, corpus: str | os.PathLike[str] | None = None,
                qrels: str | os.PathLike[str] | None = None,
                sets: Sequence[str] | None = None) -> tuple[list[tuple[BenchSet, Path]], Path, Path | None]:
    """The files of a suite in ``data``, checked to exist.

    Args:
        suite: The suite.
        data: Its data folder.
        corpus: The corpus file, when not at its place in ``data``.
        qrels: The qrels file, when not at its place in ``data``.
        sets: Run only these sets (by name, in the suite's order).

    Returns:
        ``(set, file)`` pairs, the corpus file and the qrels file (None if the suite has none).

    Raises:
        ValueError: For a set name the suite does not have.
        BenchDataError: Naming every missing file (and docs/reference/benchmarks.md, which says where it comes from).
    """
    root = Path(data)
    names = [s.name for s in suite.sets]
    unknown = [s for s in (sets or ()) if s not in names]
    if unknown:
        raise ValueError(f"suite {suite.name} has no set {unknown[0]!r}; its sets: {', '.join(names)}")
    chosen = [s for s in suite.sets if not sets or s.name in sets]
    pairs = [(s, root / s.path) for s in chosen]
    corpus_path = Path(corpus) if corpus is not None else root / suite.corpus
    qrels_path = Path(qrels) if qrels is not None else (root / suite.qrels if suite.qrels else None)
    missing = [str(p) for _, p in pairs if not p.is_file()]
    missing += [str(p) for p in (corpus_path, qrels_path) if p is not None and not p.is_file()]
    if missing:
        raise BenchDataError(f"suite {suite.name}: missing {len(missing)} file(s): {', '.join(missing)}; "
                             "docs/reference/benchmarks.md says where each comes from and where it goes")
    return pairs, corpus_path, qrels_path


def read_set(bench_set: BenchSet, path: Path, qrels: Path | None) -> list[Any]:
    """The questions of one set file (:class:`searchenv.tasks.QAExample`).

    Raises:
        CorpusFormatError: Naming the file, line and field of a bad record.
    """
    if bench_set.layout == "flashrag":
        from searchenv.tasks import read_qa_jsonl

        return read_qa_jsonl(path)
    from searchenv.tasks.formats import read_browsecomp_plus

    return read_browsecomp_plus(path, qrels)


def code_version() -> dict[str, str | None]:
    """The package version and, in a git checkout, the commit (``-dirty`` with uncommitted changes)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version("searchenv")
    except PackageNotFoundError:
        package = None
    commit = None
    try:
        proc = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], capture_output=True,
                              text=True, timeout=10, cwd=Path(__file__).resolve().parent)
        if proc.returncode == 0:
            commit = proc.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"searchenv": package, "git": commit}


_WORD = re.compile(r"\w+|[^\w\s]")


def token_counter(policy: Any) -> tuple[Callable[[str], int], str]:
    """How read text is counted: the model's tokenizer when it has one, else words and punctuation.

    Returns:
        The counting function and its unit (``tokens`` or ``words``).
    """
    encode = getattr(policy, "encode", None)
    if callable(encode) and getattr(policy, "tokenizer", True) is not None:
        try:
            encode("probe")
            return (lambda text: len(encode(text))), "tokens"
        except (ValueError, TypeError, AttributeError):
            pass
    return (lambda text: len(_WORD.findall(text))), "words"




def set_metrics(episodes: Sequence[Any], failed: int, judgements: Sequence[Any] | None,
                count: Callable[[str], int]) -> dict[str, Any]:
    """One set's row of the card from its finished episodes.

    Args:
        episodes: The finished episodes (:class:`agents.baselines.EpisodeResult`).
        failed: Episodes that failed (not scored).
        judgements: One :class:`agents.evaluation.judges.Judgement` per episode, or None without a judge.
        count: Counts the tokens of a text (:func:`token_counter`).

    Returns:
        ``n``, ``failed``, every metric of :data:`METRICS`, ``invalid_by_code``, ``unanswered``
        and, with judgements, ``judged_by`` (judgements by method) and ``judge_failures``
        (judgements that failed, left out of ``judge_acc``).
    """
    from searchenv.metrics import answer_substring_in_text

    n = len(episodes)
    codes: Counter[str] = Counter()
    for e in episodes:
        codes.update(s["invalid_reason"] for s in e.steps if s.get("invalid_reason"))
    row: dict[str, Any] = {
        "n": n,
        "failed": failed,
        "em": _mean([float(e.metrics["em"]) for e in episodes]),
        "cover_em": _mean([float(e.answer is not None and answer_substring_in_text(e.answer, e.gold))
                           for e in episodes]),
        "f1": _mean([float(e.metrics["f1"]) for e in episodes]),
        "judge_acc": _mean([float(j.correct) for j in judgements if j.method != "failed"])
        if judgements is not None else None,
        "searches": _mean([float(e.metrics["searches"]) for e in episodes]),
        "turns": _mean([float(e.metrics["turns"]) for e in episodes]),
        "answered": _mean([float(bool(e.metrics["answered"])) for e in episodes]),
        "gen_tokens": _mean([float(e.metrics["generated_tokens"]) for e in episodes]),
        "read_tokens": _mean([float(sum(count(m["content"]) for m in e.messages if m.get("role") == "tool"))
                              for e in episodes]),
        "invalid_turns": _mean([float(e.metrics["invalid_turns"]) for e in episodes]),
        "invalid_by_code": dict(sorted(codes.items())),
        "unanswered": sum(not e.metrics["answered"] for e in episodes),
    }
    if judgements is not None:
        row["judged_by"] = dict(sorted(Counter(j.method for j in judgements).items()))
        row["judge_failures"] = sum(j.method == "failed" for j in judgements)
    return row


def average_row(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The mean of the set rows (each set weighs the same, as the papers' "Avg." column); counts are summed."""
    out: dict[str, Any] = {"n": sum(r["n"] for r in rows.values()), "failed": sum(r["failed"] for r in rows.values()),
                           "infra_errors": sum(r.get("infra_errors", 0) for r in rows.values())}
    for key, _, _ in METRICS:
        values = [r[key] for r in rows.values() if r.get(key) is not None]
        out[key] = _mean(values) if len(values) == len(rows) else None
    codes: Counter[str] = Counter()
    for r in rows.values():
        codes.update(r["invalid_by_code"])
    out["invalid_by_code"] = dict(sorted(codes.items()))
    out["unanswered"] = sum(r["unanswered"] for r in rows.values())
    if any("judge_failures" in r for r in rows.values()):
        out["judge_failures"] = sum(r.get("judge_failures", 0) for r in rows.values())
    return out


def _questions_hash(examples: Sequence[Any]) -> str:
    return hashlib.sha256(json.dumps([[e.id, e.question, list(e.answers)] for e in examples],
                                     ensure_ascii=False).encode()).hexdigest()[:16]


def prepare_index(corpus: Path, retriever: str, *, index: str | os.PathLike[str] | None = None,
                  index_root: str | os.PathLike[str] | None = None,
                  log: Callable[[str], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """One index of the corpus: the folder given (checked against the corpus) or the cached one, built on first use.

    Returns:
        The index folder and its metadata (:func:`searchenv.retrievers.index.metadata.read_meta`).

    Raises:
        RetrieverError: If ``index`` is not an index, or was built from another corpus.
    """
    from searchenv.retrievers import cached_index_folder, retriever_for_corpus
    from searchenv.retrievers.index.metadata import check_fresh, read_meta

    if index is not None:
        check_fresh(index, corpus)
        return Path(index), read_meta(index)
    root = Path(index_root) if index_root is not None else None
    folder = cached_index_folder(retriever, corpus, root)
    if log is not None:
        built = (folder / "searchenv_index.json").is_file()
        log(f"{'checking' if built else 'building'} the {retriever} index of {corpus} in {folder}")
    retriever_for_corpus(retriever, corpus, root)
    return folder, read_meta(folder)


def bench_retriever(corpus: Path, retriever: Any, *, index: str | os.PathLike[str] | None = None,
                    index_root: str | os.PathLike[str] | None = None, options: Mapping[str, Any] | None = None,
                    log: Callable[[str], None] | None = None) -> tuple[Any, str | None, dict[str, Any]]:
    """The retriever a bench runs with, its label, and what the card says of it.

    ``index`` or ``retriever`` as a server URL searches that server (the card takes its kind and
    corpus fingerprint from ``/health``); ``retriever`` as ``module:Class`` or an entry-point name
    builds that class with ``options`` (and ``corpus=`` if it takes one); an object with
    ``search_batch`` is used as is; otherwise :func:`prepare_index`.

    Returns:
        What :func:`agents.evaluation.evaluate.evaluate` takes as ``retriever``, its label (None: the
        default), and the metadata (``kind``, ``params``, ``fingerprint``, ``meta_sha256``, ``where``).

    Raises:
        RetrieverError: If the server does not answer, or the index is not one of this corpus.
        ValueError: If a custom retriever cannot be built, or options are given without one.
    """
    from searchenv.retrievers.custom import check_retriever, is_custom_spec, load_retriever, takes_corpus
    from searchenv.retrievers.remote import is_server_url, remote_from_url

    url = next((str(x) for x in (index, retriever) if isinstance(x, str) and is_server_url(x)), None)
    custom = isinstance(retriever, str) and url is None and index is None and is_custom_spec(retriever)
    if options and not custom:
        raise ValueError("retriever options apply to a retriever given as module:Class or by entry-point name")
    if url is not None:
        health = remote_from_url(url).health()
        return url, url, {"kind": f"server ({health.get('kind')})", "params": {},
                          "fingerprint": health.get("fingerprint"), "meta_sha256": None, "where": url}
    if custom:
        built = load_retriever(str(retriever), options, corpus=corpus)
        fingerprint = getattr(built, "fingerprint", None)
        if fingerprint is None and takes_corpus(str(retriever), options):  # built over the suite's corpus file
            from searchenv.corpus import corpus_fingerprint, iter_corpus

            fingerprint = corpus_fingerprint(iter_corpus(corpus))
        return built, str(retriever), {"kind": str(retriever), "params": dict(options or {}),
                                       "fingerprint": fingerprint, "meta_sha256": None, "where": str(retriever)}
    if not isinstance(retriever, str):
        obj = check_retriever(retriever, "retriever")
        name = type(obj).__name__
        return obj, None, {"kind": name, "params": {}, "fingerprint": getattr(obj, "fingerprint", None),
                           "meta_sha256": None, "where": name}
    folder, meta = prepare_index(corpus, retriever, index=index, index_root=index_root, log=log)
    return str(folder), None, {**meta, "where": str(folder)}


def run_bench(
    suite: str | Suite,
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    agent: Any,
    *,
    corpus: str | os.PathLike[str] | None = None,
    qrels: str | os.PathLike[str] | None = None,
    sets: Sequence[str] | None = None,
    retriever: Any = "bm25",
    index: str | os.PathLike[str] | None = None,
    index_root: str | os.PathLike[str] | None = None,
    retriever_options: Mapping[str, Any] | None = None,
    infra_errors: str = "exclude",
    n: int | None = None,
    policy: Any = None,
    protocol: str = "search-r1",
    top_k: int = 3,
    max_turns: int = 4,
    batch_size: int = 32,
    seed: int = 0,
    max_new_tokens: int = 96,
    temperature: float = 0.0,
    max_doc_chars: int | None = None,
    model: str | None = None,
    judge: Any = None,
    checkpoint_settings: Mapping[str, Any] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Run a suite with one agent and settings, and write its metric card.

    Args:
        suite: A name in :data:`SUITES` or a :class:`Suite`.
        data: The folder holding the suite's files in their published layout.
        out: Output folder: ``card.json``, ``card.md``, ``transcripts/<set>.jsonl``; while
            running, ``checkpoints/`` and ``judgements/`` (a rerun continues from them).
        agent: A reference agent name or an :class:`agents.baselines.Agent`.
        corpus: The corpus file (default: its place in ``data``).
        qrels: The qrels file (default: its place in ``data``).
        sets: Run only these sets.
        retriever: Index kind (``bm25``, ``dense``) built when ``index`` is not given, a server URL,
            ``module:Class`` or an entry-point name, or a retriever object (:func:`bench_retriever`).
        index: An index folder of the corpus to use (checked to be of this corpus), or a server URL.
        index_root: Where built indexes are kept (default: the searchenv cache).
        retriever_options: Keyword arguments of a retriever given as ``module:Class``.
        infra_errors: ``"exclude"``: episodes in which the retriever failed are counted
            (``infra_errors``), not scored; ``"score"``: scored too.
        n: Questions per set (the first n; all when None).
        policy: The model of LLM agents.
        protocol: Action protocol.
        top_k: Documents per search.
        max_turns: Turn budget per question.
        batch_size: Episodes in flight.
        seed: Run seed.
        max_new_tokens: Tokens per LLM turn.
        temperature: Sampling temperature of LLM agents.
        max_doc_chars: Characters of each document shown (default: the environment's).
        model: What the model is, for the card (a name, file or URL).
        judge: A :class:`agents.evaluation.judges.ChoiceAnswerJudge` (None: no judge accuracy).
        checkpoint_settings: More settings that make two runs the same (as :func:`agents.evaluation.evaluate.evaluate`).
        on_progress: Called with (episodes done, episodes in all) over the whole suite.
        log: Called with lines of progress.
        device: Where an agent that loads its own model puts it.

    Returns:
        The card (also written to ``out/card.json`` and ``out/card.md``).

    Raises:
        BenchDataError: If a file is missing.
        CorpusFormatError: For a bad record (naming file, line and field).
        RetrieverError: If the index cannot be built or opened, or belongs to another corpus.
        ValueError: For bad settings, saved episodes of a run with other settings, a set whose
            answers cannot give each question the judge's decoys, a saved verdict that fails its
            checks (:func:`judge_set`), or a symbolic link where a file or folder under ``out`` goes.
    """
    from agents.baselines import make_agent
    from agents.evaluation.evaluate import evaluate
    from searchenv.env import DEFAULT_MAX_DOC_CHARS

    spec = SUITES[suite] if isinstance(suite, str) and suite in SUITES else suite
    if not isinstance(spec, Suite):
        raise ValueError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be a positive integer or None, got {n!r}")
    out_dir = Path(out)
    pairs, corpus_path, qrels_path = suite_files(spec, data, corpus=corpus, qrels=qrels, sets=sets)
    for name in ("checkpoints", "judgements", "transcripts", "card.json", "card.md"):
        refuse_link(out_dir / name)
    loaded = []
    pools: dict[str, list[str]] = {}
    for bench_set, path in pairs:
        for folder_name, leaf in (("checkpoints", bench_set.name), ("judgements", f"{bench_set.name}.jsonl"),
                                  ("transcripts", f"{bench_set.name}.jsonl")):
            refuse_link(out_dir / folder_name / leaf)
        examples = read_set(bench_set, path, qrels_path)
        loaded.append((bench_set, path, examples[:n] if n is not None else examples))
        if judge is not None:  # decoys: answers of the whole set file, also with --n
            pools[bench_set.name] = judge_pool(examples)
            check_decoys(judge, bench_set.name, loaded[-1][2], pools[bench_set.name])
    ret, ret_label, meta = bench_retriever(corpus_path, retriever, index=index, index_root=index_root,
                                           options=retriever_options, log=log)
    if isinstance(agent, str):
        agent = make_agent(agent, policy=policy, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                           device=device)
    count, unit = token_counter(getattr(agent, "policy", None) or policy)
    env_kwargs = {"max_doc_chars": max_doc_chars} if max_doc_chars else None
    total = sum(len(ex) for _, _, ex in loaded)
    done_by_set: dict[str, int] = {}

    rows: dict[str, dict[str, Any]] = {}
    files: dict[str, Any] = {}
    transcripts: list[tuple[Path, list[str]]] = []
    t0 = time.perf_counter()
    for bench_set, path, examples in loaded:
        def say(line: str, name: str = bench_set.name) -> None:
            if log is not None:
                log(f"{name}: {line}")

        def progress(done: int, _all: int, name: str = bench_set.name) -> None:
            done_by_set[name] = done
            if on_progress is not None:
                on_progress(sum(done_by_set.values()), total)

        result = evaluate(agent, task=examples, retriever=ret, retriever_label=ret_label, policy=policy,
                          protocol=protocol, infra_errors=infra_errors,
                          top_k=top_k, max_turns=max_turns, batch_size=batch_size, seed=seed,
                          max_new_tokens=max_new_tokens, env_kwargs=env_kwargs,
                          checkpoint_dir=out_dir / "checkpoints" / bench_set.name,
                          checkpoint_settings={"suite": spec.name, "set": bench_set.name, "model": model,
                                               "temperature": temperature, **dict(checkpoint_settings or {})},
                          log=say, on_progress=progress, device=device)
        scored = result.scored_episodes  # without the episodes the retriever failed in (unless scored)
        judgements = None
        if judge is not None and scored:
            if log is not None:
                log(f"judging {len(scored)} answers of {bench_set.name}")
            judgements = judge_set(judge, examples, scored, out_dir / "judgements" / f"{bench_set.name}.jsonl",
                                   pool=pools[bench_set.name])
        rows[bench_set.name] = set_metrics(scored, len(result.failures), judgements, count)
        rows[bench_set.name]["infra_errors"] = result.row["infra_errors"]
        if result.row["infra_errors"]:
            rows[bench_set.name]["infra_error_ids"] = result.row["infra_error_ids"][:20]
        if result.failures:
            rows[bench_set.name]["failures"] = result.failures[:20]
        if judgements is not None and rows[bench_set.name]["judge_failures"]:
            rows[bench_set.name]["judge_failed"] = [
                {"example_id": e.example_id, "error": j.reason} for e, j in zip(scored, judgements, strict=True)
                if j.method == "failed"][:20]
        files[bench_set.name] = {"path": str(path), "split": bench_set.split, "questions": len(examples),
                                 "questions_sha256": _questions_hash(examples)}
        verdict_of = {id(e): v for e, v in zip(scored, judgements or [None] * len(scored), strict=True)}
        transcripts.append((out_dir / "transcripts" / f"{bench_set.name}.jsonl",
                            [json.dumps({**e.to_dict(), **({"judgement": v.to_dict()} if (v := verdict_of.get(id(e)))
                                                           is not None else {})}, ensure_ascii=False)
                             for e in result.episodes]))
    settings = {
        "suite": spec.name,
        "sets": [b.name for b, _, _ in loaded],
        "questions_per_set": n,
        "corpus_fingerprint": meta.get("fingerprint"),
        "corpus": str(corpus_path),
        "index_kind": meta.get("kind"),
        "index_hash": meta.get("meta_sha256"),
        "index": meta.get("where"),
        "retriever": {"kind": meta.get("kind"), "params": meta.get("params", {})},
        "top_k": top_k,
        "max_turns": max_turns,
        "protocol": protocol,
        "max_doc_chars": max_doc_chars or DEFAULT_MAX_DOC_CHARS,
        "agent": agent.name,
        "model": model,
        # a generation copy of the weights (bfloat16 on a CPU that has it) changes the numerics: say so
        "sampling": {"temperature": temperature, "max_new_tokens": max_new_tokens, "seed": seed,
                     **generation_settings(agent)},
        "judge": judge.describe() if judge is not None else None,
        "code_version": code_version(),
        "infra_errors": infra_errors,
    }
    card = {
        "searchenv_card": CARD_VERSION,
        "suite": spec.name,
        "description": spec.description,
        "settings": settings,
        "files": files,
        "sets": rows,
        "average": average_row(rows),
        "read_token_unit": unit,
        "published": [dict(r, note="published, not measured here") for r in PUBLISHED.get(spec.name, ())],
        "seconds": round(time.perf_counter() - t0, 3),
    }
    for path, lines in transcripts:
        atomic_write_lines(path, lines)
    write_card(card, out_dir)
    for bench_set, _, _ in loaded:  # complete: the saved episodes are in the transcripts now
        if not rows[bench_set.name]["failed"] and not rows[bench_set.name].get("judge_failures"):
            for p in (out_dir / "checkpoints" / bench_set.name).glob("*.jsonl"):
                p.unlink()
    return card


def write_card(card: Mapping[str, Any], out: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``card.json`` and ``card.md`` (each through a temporary file and a rename)."""
    out_dir = Path(out)
    paths = {"json": out_dir / "card.json", "md": out_dir / "card.md"}
    atomic_write_lines(paths["json"], json.dumps(card, indent=2, ensure_ascii=False).splitlines())
    atomic_write_lines(paths["md"], card_markdown(card).splitlines())
    return paths


def read_card(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``card.json``.

    Raises:
        ValueError: If the file is not a metric card (naming the file and the field).
    """
    from searchenv.utils.jsonsafe import loads

    card = loads(Path(path).read_bytes(), str(path))
    if not isinstance(card, dict) or card.get("searchenv_card") != CARD_VERSION:
        raise ValueError(f"{path}: field 'searchenv_card': not a metric card of version {CARD_VERSION} "
                         "(written by searchenv bench)")
    for key in ("settings", "sets", "average"):
        if not isinstance(card.get(key), dict):
            raise ValueError(f"{path}: field {key!r}: expected an object, got {card.get(key)!r:.60}")
    return card


def _fmt(key: str, value: Any) -> str:
    from agents.evaluation.evaluate import format_cell

    return format_cell(key, value, METRICS)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 90 else text[:87] + "..."


def card_markdown(card: Mapping[str, Any]) -> str:
    """The card as Markdown: results per set and averaged, published rows, failures, settings."""
    s = card["settings"]
    unit = card.get("read_token_unit", "tokens")
    lines = [f"# {card['suite']}: {s['agent']} ({s.get('model') or 'no model'})", "",
             str(card.get("description", "")), ""]
    head = ["Set", "n", "Failed"] + [t if k != "read_tokens" else f"Read {unit}/q" for k, t, _ in METRICS]
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for name, row in [*card["sets"].items(), ("average", card["average"])]:
        cells = [name if name != "average" else "**average**", str(row["n"]), str(row["failed"])]
        lines.append("| " + " | ".join(cells + [_fmt(k, row.get(k)) for k, _, _ in METRICS]) + " |")
    lines += ["", "Average: the mean of the set means (each set weighs the same); n and counts are summed. Cover EM: "
              "a gold answer is a substring of the prediction, both normalised."]
    published = card.get("published") or []
    if published:
        names = list(card["sets"])
        lines += ["", "Published, not measured here (EM unless said otherwise):", ""]
        head = ["Reference", *names, "Avg. (all seven)"]
        lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        for r in published:
            cells = [r["name"], *[_fmt("em", r["values"].get(x)) for x in names], _fmt("em", r.get("average"))]
            lines.append("| " + " | ".join(cells) + " |")
        sources: dict[tuple[str, str], list[str]] = {}
        for r in published:
            sources.setdefault((r["source"], r["settings"]), []).append(r["name"])
        for (source, settings), rows_named in sources.items():
            lines.append(f"\n{'; '.join(rows_named)}: {source}. Settings: {settings}.")
    avg = card["average"]
    lines += ["", f"Invalid turns by code: {_short(avg['invalid_by_code']) if avg['invalid_by_code'] else 'none'}; "
              f"unanswered (turn budget spent): {avg['unanswered']}; failed episodes (not scored): {avg['failed']}"
              + (f"; failed judgements (not in judge acc): {avg['judge_failures']}." if "judge_failures" in avg
                 else ".")]
    lines += ["", "| Setting | Value |", "|---|---|"]
    for key in COMPARABILITY:
        value = s.get(key)
        if key == "judge" and isinstance(value, dict):
            value = {"model": value.get("model"), "kind": value.get("kind"), "decoys": value.get("decoys"),
                     "prompt_sha256": _prompt_hash(value)}
        lines.append(f"| {key} | {_short(value)} |")
    lines.append(f"| questions_per_set | {_short(s.get('questions_per_set'))} |")
    return "\n".join(lines) + "\n"


def _prompt_hash(judge: Mapping[str, Any]) -> str:
    text = json.dumps([judge.get("system_prompt"), judge.get("template")], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compare_cards(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The settings in which two cards differ, one line each (empty: the numbers are comparable).

    Args:
        a: A card (:func:`read_card`).
        b: Another card.

    Returns:
        ``"SETTING: A vs B"`` per differing setting of :data:`COMPARABILITY` (nested settings
        by their dotted path), and the sets only one card has.
    """
    def flat(value: Any, prefix: str) -> dict[str, Any]:
        if isinstance(value, dict) and value:
            out: dict[str, Any] = {}
            for k, v in value.items():
                out.update(flat(v, f"{prefix}.{k}"))
            return out
        return {prefix: value}

    lines = []
    for key in COMPARABILITY:
        fa, fb = flat(a["settings"].get(key), key), flat(b["settings"].get(key), key)
        for path in sorted(set(fa) | set(fb)):
            if fa.get(path) != fb.get(path):
                lines.append(f"{path}: {_short(fa.get(path))} vs {_short(fb.get(path))}")
    for name in sorted(set(a["sets"]) ^ set(b["sets"])):
        lines.append(f"set {name}: only in {'the first' if name in a['sets'] else 'the second'} card")
    for name in sorted(set(a["sets"]) & set(b["sets"])):
        if a["sets"][name]["n"] + a["sets"][name]["failed"] != b["sets"][name]["n"] + b["sets"][name]["failed"]:
            lines.append(f"set {name}: {a['sets'][name]['n']} vs {b['sets'][name]['n']} questions scored")
    return lines
