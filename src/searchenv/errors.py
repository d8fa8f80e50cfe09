"""Every public error (and warning) of ``searchenv`` and ``agents``, in one module.

``from searchenv.errors import RetrieverError, CheckpointError`` works for each of them; the
modules that raise them import them from here, so the old paths (``searchenv.retrievers.base.RetrieverError``,
``agents.trainers.checkpoints.CheckpointError``, ...) give the same classes. ``agents``' errors
live here too, because ``searchenv`` never imports ``agents``. This module imports nothing of the
project: any module may import it.

The families:

- retrieval: :class:`RetrieverError` (the environment turns it into ``info["infra_error"]``),
  :class:`StaleIndexError`, :class:`IndexIntegrityError`;
- data: :class:`CorpusFormatError`, :class:`JSONInputError`, :class:`DataWarning` (a warning);
- names: :class:`UnknownNameError` (a registry has no entry of that name);
- serving: :class:`BadTaskRequest` (400 over HTTP);
- models: :class:`GenerationError`, :class:`ModelServerError`, :class:`ModelRequestsError`;
- runs and results: :class:`CheckpointError`, :class:`ReportError`, :class:`BenchDataError`,
  :class:`SearcherNotFoundError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "BadTaskRequest",
    "BenchDataError",
    "CheckpointError",
    "CorpusFormatError",
    "DataWarning",
    "GenerationError",
    "IndexIntegrityError",
    "JSONInputError",
    "ModelRequestsError",
    "ModelServerError",
    "ReportError",
    "RetrieverError",
    "SearcherNotFoundError",
    "StaleIndexError",
    "UnknownNameError",
]


# ---- retrieval ---------------------------------------------------------------------------------------


class RetrieverError(RuntimeError):
    """A retriever could not answer (server down, timeout, malformed reply, missing index).

    The environment turns this into an observation and sets ``info["infra_error"]``
    so trainers can drop the trajectory instead of learning from an outage.
    """


class StaleIndexError(RetrieverError):
    """The index was built from a different corpus than the one it is used with."""


class IndexIntegrityError(RetrieverError):
    """The index's files disagree with its metadata or with each other (damaged, edited, half-copied)."""


# ---- data --------------------------------------------------------------------------------------------


class CorpusFormatError(ValueError):
    """A corpus or QA file has a malformed record; the message names file, line and field."""


class JSONInputError(ValueError):
    """JSON input that cannot be used; the message names where it came from and what is wrong."""


class DataWarning(UserWarning):
    """Data that runs but would not measure what the user expects (say, evidence ids an index lacks).

    The command line prints each one once as ``warning: MESSAGE`` on stderr
    (:func:`searchenv.cli.data_warnings_to_stderr`).
    """


# ---- names -------------------------------------------------------------------------------------------


class UnknownNameError(KeyError, ValueError):
    """A name no registry entry has; the message names the kind, the name and the names there are.

    A ``KeyError`` (a registry is a mapping) and a ``ValueError`` (what looking a name up raised
    before registries shared one type), so either ``except`` catches it.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


# ---- serving -----------------------------------------------------------------------------------------


class BadTaskRequest(ValueError):
    """A task-API request naming no split or question of the OpenEnv server: a ``ValueError``, 400 over HTTP.

    The server's app answers it with status 400 and ``{"detail": message}``
    (:func:`searchenv.integrations.openenv.create_app`).
    """


# ---- models ------------------------------------------------------------------------------------------


class GenerationError(RuntimeError):
    """Some prompts of a batched call got no generation (a model server's requests failed).

    The others did: an agent keeps them and fails only the episodes whose prompt failed.

    Attributes:
        results: Per prompt, in order: its ``Generation`` (:class:`agents.policies.base.Generation`),
            or None where it failed.
        errors: Per prompt: why it failed, or None where it did not.
    """

    def __init__(self, message: str, results: Sequence[Any | None], errors: Sequence[str | None]) -> None:
        super().__init__(message)
        self.results = list(results)
        self.errors = list(errors)


class ModelServerError(RuntimeError):
    """A request to the model server failed (the message names the URL and the reason)."""

    http_status: int | None = None


class ModelRequestsError(ModelServerError, GenerationError):
    """Some requests of one ``generate`` call failed after their retries; the rest are in ``results``.

    The message is the failure's (the first one's, with how many failed, when several did).
    """


# ---- runs and results --------------------------------------------------------------------------------


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (damaged, holding unsafe objects, or not of this run).

    The message names the file and says what to do.
    """


class ReportError(ValueError):
    """A run folder the page cannot be built from; the message names the file (line, field) and the reason."""


class BenchDataError(FileNotFoundError):
    """A file of a suite is missing (the message names it and where it comes from)."""


class SearcherNotFoundError(FileNotFoundError):
    """No trained searcher at the given path; the message says how to produce one."""
