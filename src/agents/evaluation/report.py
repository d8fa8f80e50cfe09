r"""One self-contained HTML page for a run folder: ``searchenv report RUN_DIR`` -> ``RUN_DIR/report.html``.

The page reads nothing from the network: its style and script are inline (:mod:`agents.evaluation.report_page`),
pictures are ``data:`` URIs, and a Content-Security-Policy forbids every other source. It shows

- the results table of ``results.json`` (``searchenv eval --out``), sortable, with an interval beside a
  number where the row has one (``<key>_ci`` or ``intervals[<key>]``, a ``[low, high]`` pair);
- every episode of ``transcripts/*.jsonl`` as a conversation, the agents side by side on each question:
  thinking, queries, the documents that came back (gold evidence marked when the record lists
  ``evidence_ids``, a document as long as the run's ``max_doc_chars`` marked as cut), the answer against the
  gold answers, each turn's reward terms; filters for wrong answers, invalid turns and failed episodes
  (infrastructure errors), and a search over questions;
- for a training run, the learning curves as a picture (drawn by the caller, who passes the PNG bytes), and the
  episodes sampled at several steps (``samples/step-<N>/``, written by ``searchenv train KIND --report``), the
  steps side by side on each question, so a reader sees the behaviour change;
- for a bench card (``card.json``, ``searchenv bench --out``), its sets and their average, and the settings that
  make two cards comparable.

The records travel as they were read, in one JSON blob inside ``<script type="application/json">`` with
``<``, ``>`` and ``&`` written as ``\u003c`` escapes, so no text of a transcript can close the script
element; the page's script builds every element with ``textContent``, so hostile text (HTML, script) in a
question, a document or a model's output is shown as text and runs nothing. Episodes are drawn a page at a
time, on demand, so a run of ten thousand episodes opens quickly.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.evaluation.evaluate import COLUMNS, INFRA_COLUMN
from agents.evaluation.report_page import PAGE
from searchenv.errors import ReportError
from searchenv.utils.files import publishable, refuse_link
from searchenv.utils.jsonsafe import JSONInputError, iter_jsonl, loads

#: File name of the page inside the run folder.
REPORT_NAME = "report.html"
#: What ``searchenv eval --out`` and the trainers write, read by the page.
RESULTS_NAME = "results.json"
METRICS_NAME = "metrics.jsonl"
#: What ``searchenv bench --out`` writes, read by the page.
CARD_NAME = "card.json"
#: The folder of a training run that holds the episodes sampled at several steps (:func:`sample_dirs`).
SAMPLES_NAME = "samples"


def _read_results(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``results.json``, checked field by field."""
    path = run_dir / RESULTS_NAME
    try:
        refuse_link(path, "RUN_DIR")
        data = loads(path.read_bytes(), str(path))
    except ValueError as exc:  # a link in its place, or JSON that cannot be read (naming file and line)
        raise ReportError(str(exc)) from None
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ReportError(f"{path}, field 'rows': expected a list of result rows (as searchenv eval --out writes), "
                          f"got {type(rows).__name__ if isinstance(data, dict) else type(data).__name__}")
    for i, row in enumerate(rows):
        where = f"{path}, rows[{i}]"
        if not isinstance(row, dict):
            raise ReportError(f"{where}: expected an object, got {type(row).__name__}")
        for key in ("agent", "retriever"):
            if not isinstance(row.get(key), str):
                raise ReportError(f"{where}, field '{key}': expected a string, got {row.get(key)!r:.60}")
        if "transcripts" in row and not isinstance(row["transcripts"], str):
            raise ReportError(f"{where}, field 'transcripts': expected a path relative to the run folder, "
                              f"got {row['transcripts']!r:.60}")
    return rows


def _transcript_path(run_dir: Path, rel: str, where: str) -> Path:
    """``rel`` under the run folder; a path leading out of it (absolute, ``..``, a link) is refused."""
    path = run_dir / rel
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise ReportError(f"{where}, field 'transcripts': {rel!r} leads out of the run folder; the page reads only "
                          "the run's own files")
    for part in [path, *path.parents]:
        if part == run_dir:
            break
        if part.is_symlink():
            raise ReportError(f"{part} is a symbolic link; the page reads only the run's own files and follows no "
                              "links")
    if not path.is_file():
        raise ReportError(f"{where}, field 'transcripts': {path} is not a file")
    return path


def _read_episodes(path: Path) -> list[dict[str, Any]]:
    """The records of one transcript file, each checked to be an episode object."""
    out: list[dict[str, Any]] = []
    try:
        for where, record in iter_jsonl(path):
            if not isinstance(record, dict):
                raise ReportError(f"{where}: expected an episode object, got {type(record).__name__}")
            for key, kind in (("example_id", str), ("question", str), ("messages", list), ("steps", list)):
                if not isinstance(record.get(key), kind):
                    raise ReportError(f"{where}, field '{key}': expected a {kind.__name__}, got "
                                      f"{record.get(key)!r:.60}")
            out.append(record)
    except JSONInputError as exc:
        raise ReportError(str(exc)) from None
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return out


def _eval_runs(folder: Path, root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of ``folder/results.json`` and a run per row (its transcripts read), paths relative to ``root``."""
    rows = _read_results(folder)
    runs = []
    for i, row in enumerate(rows):
        rel = row.get("transcripts")
        episodes: list[dict[str, Any]] = []
        file = None
        if rel is not None:
            path = _transcript_path(folder, rel, f"{folder / RESULTS_NAME}, rows[{i}]")
            episodes = _read_episodes(path)
            file = str(path.relative_to(root))
        config = row["config"] if isinstance(row.get("config"), dict) else {}
        runs.append({"agent": row["agent"], "retriever": row["retriever"], "file": file,
                     "max_doc_chars": config.get("max_doc_chars"), "episodes": episodes})
    return rows, runs


def sample_dirs(run_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """The folders of episodes sampled during a training run, ``(step, folder)`` in step order.

    Each is ``RUN_DIR/samples/step-<N>/``, laid out as ``searchenv eval --out`` lays a run out (``results.json``,
    ``transcripts/``), one row per agent, named ``step <N>`` (``searchenv train KIND --report`` writes them).
    """
    root = Path(run_dir) / SAMPLES_NAME
    if not root.is_dir() or root.is_symlink():
        return []
    found = []
    for folder in root.iterdir():
        match = re.fullmatch(r"step-(\d+)", folder.name)
        if match and folder.is_dir() and (folder / RESULTS_NAME).exists():
            found.append((int(match.group(1)), folder))
    return sorted(found)


def _bench_runs(root: Path) -> dict[str, Any]:
    """The page's rows, runs, columns and settings for a bench folder (``card.json``, ``transcripts/<set>.jsonl``)."""
    from agents.evaluation.bench import COMPARABILITY, METRICS, read_card

    path = root / CARD_NAME
    try:
        refuse_link(path, "RUN_DIR")
        card = read_card(path)
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    settings = card["settings"]
    agent = str(settings.get("agent", "agent"))
    kind = settings.get("index_kind") if isinstance(settings.get("index_kind"), str) else "retriever"
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for name, row in card["sets"].items():
        if not isinstance(row, dict):
            raise ReportError(f"{path}, field 'sets.{name}': expected an object, got {type(row).__name__}")
        rows.append({"set": name, "agent": agent, "retriever": kind, **row})
        rel = f"transcripts/{name}.jsonl"
        transcript = _transcript_path(root, rel, f"{path}, set {name!r}")
        runs.append({"agent": agent, "retriever": kind, "label": name, "scope": name, "file": rel,
                     "max_doc_chars": settings.get("max_doc_chars"), "episodes": _read_episodes(transcript)})
    rows.append({"set": "average", "agent": agent, "retriever": kind, **card["average"]})
    infra = [INFRA_COLUMN] if any(r.get("infra_errors") for r in rows) else []
    return {
        "title": f"{root.resolve().name}: {card.get('suite')} / {agent}",
        "label_columns": [["set", "Set"], ["agent", "Agent"]],
        "columns": [list(c) for c in (*METRICS, *infra)],
        "rows": rows,
        "runs": runs,
        "settings": dict(settings),
        "comparable": [k for k in COMPARABILITY if k in settings],
        "description": card.get("description"),
    }


def collect(run_dir: str | os.PathLike[str], *, curves_png: bytes | None = None) -> dict[str, Any]:
    """Everything the page shows, as the JSON object it embeds.

    Args:
        run_dir: A run folder: ``results.json`` with ``transcripts/`` (``searchenv eval --out``); ``card.json``
            with ``transcripts/`` (``searchenv bench --out``); and/or ``metrics.jsonl`` (a training run), with
            the episodes sampled at several steps under ``samples/`` (:func:`sample_dirs`).
        curves_png: The learning curves as PNG bytes (embedded as a ``data:`` URI), or None.

    Returns:
        ``title``, ``columns`` ((key, title, format) of the results table), ``label_columns`` (its text columns),
        ``rows`` (``results.json`` rows; a bench card's sets and their average; a training run's sampled steps),
        ``runs`` (per row: ``agent``, ``retriever``, ``file``, ``max_doc_chars`` and its ``episodes``, the
        transcript records as read; a bench run's ``label`` and ``scope``, its set), ``curves`` (a ``data:`` URI
        or None), and for a bench card ``settings`` and ``comparable`` (the settings that make two cards
        comparable).

    Raises:
        ReportError: Naming the file (and line, field) that is missing or not what the writers write.
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise ReportError(f"{root} is not a folder; give the folder of a run (searchenv eval --out, searchenv "
                          "bench --out, or a training run's folder)")
    curves = None if curves_png is None else "data:image/png;base64," + base64.b64encode(curves_png).decode()
    if (root / CARD_NAME).exists() or (root / CARD_NAME).is_symlink():
        return {**_bench_runs(root), "curves": curves}
    has_results = (root / RESULTS_NAME).exists() or (root / RESULTS_NAME).is_symlink()
    samples = [] if has_results else sample_dirs(root)
    if not has_results and curves_png is None and not samples:
        raise ReportError(f"{root / RESULTS_NAME} not found (searchenv eval --out DIR writes it), and the folder holds "
                          f"no {CARD_NAME} of a bench run and no {METRICS_NAME} of a training run: nothing to show")
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    if has_results:
        rows, runs = _eval_runs(root, root)
    for _, folder in samples:
        more_rows, more_runs = _eval_runs(folder, root)
        rows += more_rows
        runs += more_runs
    columns = list(COLUMNS) + ([INFRA_COLUMN] if any(r.get("infra_errors") for r in rows) else [])
    task = next((f"{r['task']} / {r.get('split')}" for r in rows if r.get("task")), None)
    what = f"{task}, sampled at steps {', '.join(str(s) for s, _ in samples)}" if samples and task else task
    return {
        "title": f"{root.resolve().name}" + (f": {what}" if what else ""),
        "label_columns": [["agent", "Agent"], ["retriever", "Retriever"]],
        "columns": [list(c) for c in columns],
        "rows": rows,
        "runs": runs,
        "curves": curves,
    }


def embed_json(data: Any) -> str:
    r"""``data`` as JSON text that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` are written as ``\u003c``/``\u003e``/``\u0026`` (and U+2028/U+2029 escaped), so
    neither ``</script>`` nor ``<!--`` can appear in it; ``JSON.parse`` gives back the same value, except that a
    NaN or infinite number (which JSON cannot hold) becomes null.
    """
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:  # a non-finite float somewhere: null in its place
        text = json.dumps(_finite(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                     ("\u2029", "\\u2029")):
        text = text.replace(raw, esc)
    return text


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (lists and dicts copied)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def render(data: Mapping[str, Any]) -> str:
    """The page's HTML for :func:`collect`'s object."""
    head, rest = PAGE.split("%%TITLE%%", 1)
    middle, tail = rest.split("%%DATA%%", 1)  # one pass: neither filling is searched for the other's mark
    return head + html.escape(str(data.get("title", "run report"))) + middle + embed_json(data) + tail


def read_embedded(page: str) -> Any:
    """The JSON object a page embeds (the inverse of :func:`render`, for tests and tools).

    Raises:
        ReportError: If the page holds no embedded data.
    """
    start_tag = '<script type="application/json" id="report-data">'
    start = page.find(start_tag)
    end = page.find("</script>", start + len(start_tag)) if start >= 0 else -1
    if start < 0 or end < 0:
        raise ReportError("the page holds no embedded report data")
    return json.loads(page[start + len(start_tag):end])


def write_report(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, *,
                 curves_png: bytes | None = None) -> Path:
    """Build the page of a run folder and write it atomically (a temporary file, then a rename).

    Args:
        run_dir: The run folder (:func:`collect`).
        out: The HTML file (default ``RUN_DIR/report.html``).
        curves_png: Learning curves to embed, as PNG bytes.

    Returns:
        The written path.

    Raises:
        ReportError: For a run folder the page cannot be built from, or an ``out`` that is a symbolic link.
    """
    data = collect(run_dir, curves_png=curves_png)
    target = Path(out) if out is not None else Path(run_dir) / REPORT_NAME
    try:
        refuse_link(target, "--out")
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    page = render(data)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        publishable(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def training_dirs(run_dir: str | os.PathLike[str]) -> tuple[list[Path], list[str]]:
    """The training runs a folder holds, and their legend labels, for the learning curves.

    The folder itself when it has ``metrics.jsonl``; else its sub-folders that have one, labelled by name without
    a trailing ``seed<N>`` (``grpo-seed0`` and ``grpo-seed1`` are seeds of one arm, drawn as a band).
    """
    root = Path(run_dir)
    if (root / METRICS_NAME).is_file():
        return [root], [root.resolve().name]
    subs = sorted(p for p in root.iterdir() if p.is_dir() and (p / METRICS_NAME).is_file()) if root.is_dir() else []
    return subs, [re.sub(r"[-_.]?seed[-_]?\d+$", "", p.name) or p.name for p in subs]

