"""``searchqa``: SearchQA-v0 (searchenv) as a verifiers environment, a distribution of its own.

verifiers 0.4 finds an environment by importing the module its id names (``vf-eval searchqa``) and taking the
``Taskset``, ``Harness`` and ``Env`` subclasses in ``__all__``; :func:`load_environment` builds the same
environment from keyword settings, as the Environments Hub loads one. The classes live in
:mod:`searchenv.integrations.verifiers`.
"""

from __future__ import annotations

from typing import Any

from searchenv.integrations.verifiers import (
    SearchQAEnvConfig,
    SearchQAHarness,
    SearchQATaskset,
    SearchQAVerifiersEnv,
)

__all__ = ["SearchQAHarness", "SearchQATaskset", "SearchQAVerifiersEnv", "load_environment"]


def load_environment(**settings: Any) -> SearchQAVerifiersEnv:
    """The environment, its taskset built from ``settings`` (``--env.taskset.*``: dataset, split, index, ...).

    Example::

        env = load_environment(dataset="synthetic-2hop", split="dev", top_k=3)

    Raises:
        pydantic.ValidationError: Naming the setting, for an unknown one or a value out of its range.
    """
    config = SearchQAEnvConfig.model_validate({"taskset": {"id": "searchqa", **settings}})
    return SearchQAVerifiersEnv(config)
