"""searchenv: Gymnasium environments where language-model agents reason, search and answer.

Importing the package registers ``SearchQA-v0``::

    import gymnasium as gym
    env = gym.make("searchenv:SearchQA-v0", task="synthetic-2hop", retriever="bm25")

Heavy dependencies (torch, faiss, transformers) are imported only by the modules that
need them, so this import stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym

from searchenv.corpus import Document, read_corpus, write_corpus
from searchenv.protocols import ActionProtocol, Answer, Invalid, Open, Search, get_protocol
from searchenv.retrievers.base import Hit, Retriever, RetrieverError
from searchenv.spaces import UnicodeText
from searchenv.tasks.example import QAExample, SubQuestion
from searchenv.tasks.registry import load_task
from searchenv.utils.moved import register_moves, renamed_names

if TYPE_CHECKING:
    from searchenv.env import SearchQAEnv

#: Modules that moved (CHANGELOG.md): old dotted name -> new one. The old names
#: keep importing (with a DeprecationWarning) for one release.
MOVED_MODULES = {
    "searchenv.verifiers": "searchenv.rewards.verifiers",
    "searchenv.tasks.base": "searchenv.tasks",
    "searchenv.docstore": "searchenv.retrievers.index.docstore",
    "searchenv.retrievers.index_meta": "searchenv.retrievers.index.metadata",
    "searchenv.retrievers.server": "searchenv.serving.server",
    "searchenv.httpclient": "searchenv.utils.httpclient",
    "searchenv.jsonsafe": "searchenv.utils.jsonsafe",
    "searchenv.files": "searchenv.utils.files",
    "searchenv.protocols.actions": "searchenv.actions",
    "searchenv.serving.client": "searchenv.retrievers.remote",
    "searchenv.retrievers.quality": "searchenv.retrieval_quality",
    "searchenv.envpool": "searchenv.idle_envs",
}
register_moves(MOVED_MODULES)

__version__ = "0.1.0"
ENV_ID = "SearchQA-v0"

__all__ = [
    "ENV_ID",
    "ActionProtocol",
    "Answer",
    "Document",
    "Hit",
    "Invalid",
    "Open",
    "QAExample",
    "Retriever",
    "RetrieverError",
    "Search",
    "SearchQAEnv",
    "SubQuestion",
    "UnicodeText",
    "get_protocol",
    "load_task",
    "read_corpus",
    "write_corpus",
]


_renamed = renamed_names(__name__, {"Protocol": ("searchenv.protocols.base", "ActionProtocol")})


def __getattr__(name: str) -> Any:
    if name == "SearchQAEnv":
        from searchenv.env import SearchQAEnv

        return SearchQAEnv
    return _renamed(name)


if ENV_ID not in gym.registry:
    gym.register(
        id=ENV_ID, entry_point="searchenv.env:SearchQAEnv", vector_entry_point="searchenv.vector:SearchQAVectorEnv"
    )
