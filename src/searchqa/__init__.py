"""``searchqa`` inside searchenv: deprecated; the verifiers environment is a distribution of its own now.

Install it from its folder, ``pip install env-packages/verifiers/searchqa`` (the module ``searchqa``, with
``load_environment``); an installed one comes first on ``sys.path`` and this module is not imported. This one
stays for one release: it gives the same classes (:mod:`searchenv.integrations.verifiers`) with a
``DeprecationWarning``. Needs ``pip install 'searchenv[verifiers]'``.
"""

import warnings

warnings.warn("the searchqa module shipped inside searchenv is deprecated and goes in the next release: install "
              "the verifiers environment package, pip install env-packages/verifiers/searchqa (the same classes, "
              "and load_environment)", DeprecationWarning, stacklevel=2)

from searchenv.integrations.verifiers import (  # noqa: E402 (after the warning, which an import error must not hide)
    SearchQAHarness,
    SearchQATaskset,
    SearchQAVerifiersEnv,
)

__all__ = ["SearchQAHarness", "SearchQATaskset", "SearchQAVerifiersEnv"]
