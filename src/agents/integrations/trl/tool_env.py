"""The ``environment_factory`` path: SearchQA-v0 as tools (:class:`SearchQAToolEnv`, browse and arena variants)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from agents.integrations.trl.prompts import _question
from searchenv.env import SearchQAEnv
from searchenv.metrics import episode_metrics
from searchenv.protocols import ActionProtocol, Search, tool_turn_text
from searchenv.tasks import QAExample

#: Arguments that must be text: TRL hands the tools whatever JSON the model wrote, and an object, a list or
#: null written into a tag turn would read as text (``{'a': 'X'}`` answers "a X"). Document numbers are
#: written as they come, and the protocol refuses what is not one (``bad_open``, a malformed citation).
_ARGUMENT_TYPES: dict[str, tuple[type, str]] = {"query": (str, "a string"), "answer": (str, "a string"),
                                                "analysis": (str, "a string")}


def _argument_problem(arguments: Mapping[str, Any]) -> str | None:
    """Why a call's arguments cannot be written as the tag turn (a value of the wrong type), else None."""
    for name, value in arguments.items():
        if name not in _ARGUMENT_TYPES:
            continue
        wanted, what = _ARGUMENT_TYPES[name]
        if isinstance(value, bool) or not isinstance(value, wanted):
            return f"`{name}` must be {what}, got {type(value).__name__}"
    return None


class SearchQAToolEnv:
    r"""SearchQA-v0 as tools for ``GRPOTrainer(environment_factory=...)`` (tool-calling chat models).

    TRL builds one instance per rollout (then reuses it), calls :meth:`reset` with the dataset
    row, lets the model call :meth:`search` and :meth:`answer` as JSON tools, and scores the
    rollout with :meth:`get_reward`. Each tool call is one environment turn, so the turn budget,
    the reward preset and its terms are SearchQA-v0's; the answer is only what the model passed to
    ``answer``. Under a tag protocol the call is written as its tag turn (``<search> query
    </search>``, ``<answer> text </answer>``, as the protocol's ``from_tags`` says it; a lone
    surrogate TRL decoded from a ``\ud800`` escape is written back as that escape), under a
    tool-call protocol (``tools``/``tools-browse``) as the call itself, so
    the protocol's parser checks its arguments. A call the protocol refuses (an empty or too long
    answer, a tag inside it, a bad document number) is an invalid turn, counted as any other, and
    the tool returns the environment's reason; ``answer`` says "Answer recorded." only when the
    answer was. A query, answer or analysis that is not text (an object, a list, null) is refused
    at the tool, before any turn, under every protocol but ``tools``/``tools-browse`` (whose parser
    refuses it as a ``bad_arguments`` turn)::

        make_env = SearchQAToolEnv.factory("synthetic-2hop", retriever="bm25", reward="default")
        trainer = GRPOTrainer(model, train_dataset=Dataset.from_list(make_env.dataset()),
                              environment_factory=make_env, args=GRPOConfig(...))

    The chat model's template must render tool calls (TRL checks), e.g. Qwen2.5/Qwen3.

    Args:
        env: The environment the episodes run in (shared settings; one instance per tool env).
    """

    def __init__(self, env: SearchQAEnv) -> None:
        self._env = env
        self._return = 0.0
        self._done = True
        self._final: dict[str, Any] | None = None
        self._info: dict[str, Any] | None = None  # the last step's info (for demonstrations replayed through the tools)

    @classmethod
    def factory(cls, task: str | os.PathLike[str] | Sequence[QAExample] = "synthetic-2hop", *,
                split: str = "train", **env_kwargs: Any) -> _ToolEnvFactory:
        """A zero-argument factory for ``environment_factory`` (instances share the task and the index).

        Called on :class:`SearchQAToolEnv`, the tools follow the protocol's features: under one with
        an ``open`` action (``can_open``: ``browse``, ``tools-browse``) the instances are
        :class:`SearchQABrowseToolEnv` (an ``open`` tool besides ``search`` and ``answer``), under one
        whose answer cites documents (a ``relevance`` tag: ``arena``) :class:`SearchQAArenaToolEnv`
        (``answer`` also takes the cited documents and an analysis), else :class:`SearchQAToolEnv`.
        A protocol registered later is served the same way.

        Args:
            task: Task name, QA JSONL file or examples.
            split: Split of a named task.
            **env_kwargs: :class:`~searchenv.env.SearchQAEnv` arguments (``retriever``, ``corpus``,
                ``reward``, ``protocol``, ``top_k``, ``max_turns``, ...).

        Raises:
            ValueError: For a protocol that reads neither tool calls nor tag turns, or that both opens
                documents and cites them (no tool env has both).
        """
        template = SearchQAEnv(task, split=split, **env_kwargs)
        shared = {k: v for k, v in env_kwargs.items() if k != "corpus"}
        shared["retriever"] = template.retriever  # opened once; every instance searches it
        if cls is SearchQAToolEnv:  # the tools follow the protocol (TRL offers a class's public methods)
            cls = _tool_env_class(template.protocol)
        return _ToolEnvFactory(cls, template.examples, shared)

    @classmethod
    def _serves(cls, protocol: ActionProtocol) -> bool:
        """Whether this class's tools are the actions of ``protocol`` beyond ``search`` and ``answer``."""
        return False

    def reset(self, **row: Any) -> str | None:
        """Start the episode of the row's ``example_id`` (or ``question`` text); nothing is added to the prompt.

        Raises:
            ValueError: If the row names no question of the task.
        """
        if "example_id" in row:
            self._env.reset(options={"example_id": str(row["example_id"])})
        else:
            question = _question(row.get("prompt"), 0)
            index = next((i for i, ex in enumerate(self._env.examples) if ex.question == question), None)
            if index is None:
                raise ValueError(f"row names no question of the task: {question[:100]!r}")
            self._env.reset(options={"index": index})
        self._return, self._done, self._final, self._info = 0.0, False, None, None
        return None

    def _refused(self, arguments: Mapping[str, Any]) -> str | None:
        """Why a call is refused before it reaches a tag protocol's environment (mistyped arguments), else None."""
        if self._env.protocol.native_tools:
            return None
        problem = _argument_problem(arguments)
        return None if problem is None else f"The call was not made: {problem}."

    def _turn(self, name: str, arguments: dict[str, Any], tags: str) -> dict[str, Any]:
        """Step the environment with one call: as that call under a native-tools protocol, else as the tag turn."""
        if self._env.protocol.native_tools:
            turn = tool_turn_text("", [{"function": {"name": name, "arguments": arguments}}])
        else:  # TRL decoded the model's JSON: a lone surrogate goes back to the escape the model wrote
            turn = self._env.protocol.from_tags(tags.encode("utf-8", "backslashreplace").decode("utf-8"))
        _, reward, terminated, truncated, info = self._env.step(turn)
        self._return += float(reward)
        self._info = info
        if terminated or truncated:
            self._done, self._final = True, info
        return info

    def _result(self, info: Mapping[str, Any], recorded: str | None = None) -> str:
        """What a tool returns: ``recorded`` for an answer taken, else the step's reply (and the end of the budget)."""
        if recorded is not None and info["action_type"] == "answer":
            return recorded
        text = _reply(info)
        if recorded is not None:
            text = f"The answer was not recorded. {text}"
        return text if not self._done else text + "\nThe turn budget is spent; the episode is over."

    def search(self, query: str) -> str:
        """Search the document collection.

        Args:
            query: What to look for, in a few words.

        Returns:
            The top documents, numbered, each with its title.
        """
        if self._done:
            return "The episode is over; no more searches."
        refused = self._refused({"query": query})
        if refused is not None:
            return refused
        return self._result(self._turn("search", {"query": query}, f"<search> {query} </search>"))

    def answer(self, answer: str) -> str:
        """Give the final answer to the question (ends the episode).

        Args:
            answer: The answer, as short as possible (a name, a place, a year).

        Returns:
            A confirmation, or why the answer was not recorded.
        """
        if self._done:
            return "The episode is over; the answer was not recorded."
        refused = self._refused({"answer": answer})
        if refused is not None:
            return f"The answer was not recorded. {refused}"
        info = self._turn("answer", {"answer": answer}, f"<answer> {answer} </answer>")
        return self._result(info, recorded="Answer recorded.")

    def get_reward(self) -> float:
        """The episode's return under the reward preset (an episode never answered is ended first)."""
        if not self._done:
            self._final = self._env.end_episode("rollout_ended")
            self._done = True
        return self._return

    @property
    def final_metrics(self) -> dict[str, float]:
        """:func:`searchenv.metrics.episode_metrics` of the finished episode (empty before it ends).

        A property, not a method: TRL offers every public method of the class as a tool.
        """
        return episode_metrics(self._final) if self._final is not None else {}


def _reply(info: Mapping[str, Any]) -> str:
    """A step's reply as a tool's return value (without the ``<tool_response>`` tags of ``tools``: TRL adds its own)."""
    text = str(info["new_text"]).strip()
    return text.removeprefix("<tool_response>").removesuffix("</tool_response>").strip()


class SearchQABrowseToolEnv(SearchQAToolEnv):
    """:class:`SearchQAToolEnv` for a protocol with ``open`` (``browse``): ``search`` shows snippets, ``open`` reads."""

    @classmethod
    def _serves(cls, protocol: ActionProtocol) -> bool:
        """A protocol with an ``open`` action (``can_open``)."""
        return protocol.can_open

    def open(self, number: int, page: int = 1) -> str:
        """Read in full a document that an earlier search showed.

        Args:
            number: The document's number as the search showed it (Doc 3 is 3).
            page: The page of a long document, 1 for the first.

        Returns:
            The page's text, or what was wrong with the request.
        """
        if self._done:
            return "The episode is over; nothing more can be opened."
        arguments = {"number": number, **({"page": page} if page != 1 else {})}
        refused = self._refused(arguments)
        if refused is not None:
            return refused
        return self._result(self._turn("open", arguments, f"<open> {number} page {page} </open>"))


class SearchQAArenaToolEnv(SearchQAToolEnv):
    """:class:`SearchQAToolEnv` for a protocol whose answer cites documents (``arena``)."""

    @classmethod
    def _serves(cls, protocol: ActionProtocol) -> bool:
        """A protocol that reads the cited documents of an answer (a ``relevance`` tag)."""
        return "relevance" in protocol.tags

    def answer(self, answer: str, documents: list[int], analysis: str) -> str:  # type: ignore[override]
        """Give the final answer with the documents it rests on (ends the episode).

        Args:
            answer: The answer, as short as possible (a name, a place, a year).
            documents: The numbers of the documents the answer relies on, as the searches showed them.
            analysis: How those documents lead to the answer, in a sentence or two.

        Returns:
            A confirmation, or why the answer was not recorded.
        """
        if self._done:
            return "The episode is over; the answer was not recorded."
        refused = self._refused({"answer": answer, "documents": documents, "analysis": analysis})
        if refused is not None:
            return f"The answer was not recorded. {refused}"
        cited = ", ".join(str(d) for d in documents) if isinstance(documents, list | tuple) else str(documents)
        tags = f"<relevance> {cited} </relevance>\n<analysis> {analysis} </analysis>\n<answer> {answer} </answer>"
        info = self._turn("answer", {"answer": answer, "documents": documents, "analysis": analysis}, tags)
        return self._result(info, recorded="Answer recorded.")


def _tool_env_class(protocol: ActionProtocol) -> type[SearchQAToolEnv]:
    """The tool env whose tools are ``protocol``'s actions: the variant that serves it, else the plain one.

    Raises:
        ValueError: If the protocol reads neither tool calls nor tag turns (said in its format by
            ``from_tags``), or more than one variant serves it (its actions are not one class's tools).
    """
    if not protocol.native_tools and not isinstance(protocol.parse(protocol.from_tags("<search> q </search>")), Search):
        raise ValueError(f"protocol {protocol.name!r} does not read tag turns (<search> query </search>), which the "
                         "tool env writes for each call under a protocol without native tool calls; give it a "
                         "from_tags that says a tag turn in its format")
    fits = [variant for variant in (SearchQABrowseToolEnv, SearchQAArenaToolEnv) if variant._serves(protocol)]
    if len(fits) > 1:
        raise ValueError(f"protocol {protocol.name!r} both opens documents and cites them in its answer; no tool "
                         f"env offers both ({', '.join(c.__name__ for c in fits)} each offer one)")
    return fits[0] if fits else SearchQAToolEnv


class _ToolEnvFactory:
    """Builds :class:`SearchQAToolEnv` instances over one task (the index is opened once per process)."""

    def __init__(self, cls: type[SearchQAToolEnv], examples: Sequence[QAExample],
                 env_kwargs: Mapping[str, Any]) -> None:
        self._cls = cls
        self.examples = list(examples)
        self._env_kwargs = dict(env_kwargs)

    def __call__(self) -> SearchQAToolEnv:
        return self._cls(SearchQAEnv(self.examples, **self._env_kwargs))

    def dataset(self, n: int | None = None) -> list[dict[str, Any]]:
        """Rows for ``datasets.Dataset.from_list``: a chat ``prompt`` with the question, and ``example_id``."""
        examples = self.examples if n is None else self.examples[:n]
        return [{"prompt": [{"role": "user", "content": ex.question}], "example_id": ex.id} for ex in examples]


def tool_schemas(env: SearchQAToolEnv) -> list[dict[str, Any]]:
    """The JSON schemas of ``env``'s tools, as ``GRPOTrainer(environment_factory=...)`` offers them.

    TRL offers every public function of the instance's class except ``reset`` and ``get_reward``,
    in name order, and renders the prompt with them as ``tools=``; these are the same tools, as
    the schemas ``transformers`` derives from them (what a ``tools`` column of an SFT dataset holds).
    """
    import inspect

    from transformers.utils import get_json_schema

    return [get_json_schema(getattr(env, name)) for name, _ in inspect.getmembers(type(env), inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]
