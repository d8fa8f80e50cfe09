"""``searchqa``: SearchQA-v0 as a verifiers v1 environment (``vf-eval searchqa``, ``vf-validate searchqa``).

verifiers finds an environment by importing the module its id names and taking the ``Taskset``,
``Harness`` and ``Env`` subclasses in ``__all__``; the classes live in
:mod:`searchenv.integrations.verifiers`. Needs ``pip install 'searchenv[verifiers]'``.
"""

from searchenv.integrations.verifiers import SearchQAHarness, SearchQATaskset, SearchQAVerifiersEnv

__all__ = ["SearchQAHarness", "SearchQATaskset", "SearchQAVerifiersEnv"]
