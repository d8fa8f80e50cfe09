"""SearchQA-v0 as a verifiers v1 environment: ``vf-eval searchqa`` and ``vf-validate searchqa``.

verifiers 0.4 finds an environment by importing the module its id names (``searchqa``) and taking
the ``Taskset`` (and, when exported, the ``Harness``) in its ``__all__``; that module is the environment
package ``env-packages/verifiers/searchqa`` (``pip install`` from its folder), a re-export of the classes
here with ``load_environment``.

- :class:`SearchQATaskset` yields one :class:`SearchQATask` per question of a task split; its prompt
  is the system and user message of :meth:`~searchenv.env.SearchQAEnv.messages`.
- :class:`SearchQAToolset` is the tool server, shared by every rollout of a worker (built once per
  worker, the retriever opened once): the ``tools`` protocol's ``search`` and ``answer`` with the
  protocol's own JSON schemas; each call is read and answered by a
  :class:`~searchenv.env.SearchQAEnv`, so bad arguments get the environment's own error text. It is
  stateless: results are numbered as an episode's first search numbers them.
- The reward (``episode_return``) replays the trace's assistant turns (content and tool calls, as
  :func:`~searchenv.protocols.tools.tool_turn_text` writes a served model's calls) through a fresh
  :class:`~searchenv.env.SearchQAEnv` on the same question: it is the episode return that
  ``SearchQA-v0`` gives the same transcript, whatever the tool server answered. The metrics (``em``,
  ``f1``, ``searches``, ``evidence_recall``) come from the same replay.
- :meth:`SearchQATask.validate` replays the oracle (search each hop's question, answer the gold
  answer) through the same path as a model's calls and passes when it scores EM 1 and a positive
  return, so ``vf-validate``'s gold check says whether the scorer and the reward accept the answer.
- :class:`SearchQAHarness` is verifiers' own chat loop (the ``null`` harness's program) run by this
  Python on the ``subprocess`` runtime, where the ``null`` harness would first fetch its script's
  packages with ``uv``; :class:`SearchQAEnvConfig` makes ``subprocess`` the default runtime.

Needs ``verifiers`` (``pip install 'searchenv[verifiers]'`` in an environment of its own: it pins
``mcp==2.0.0``).
"""

from __future__ import annotations

import functools
import json
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import verifiers.v1 as vf
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, Tool
from pydantic import Field
from pydantic_config import BaseConfig
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harnesses.null import NullHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

from searchenv.env import SearchQAEnv
from searchenv.make import check_evidence, resolve_task, shared_retriever
from searchenv.protocols.registry import protocol_names
from searchenv.protocols.tools import tool_turn_text
from searchenv.tasks.example import QAExample

__all__ = [
    "SearchQAConfig",
    "SearchQAData",
    "SearchQAEnvConfig",
    "SearchQAHarness",
    "SearchQASettings",
    "SearchQATask",
    "SearchQATaskset",
    "SearchQAToolset",
    "SearchQAToolsetConfig",
    "SearchQAVerifiersEnv",
    "episode",
    "oracle_calls",
]


def _servable_protocols() -> list[str]:
    """The protocols :class:`SearchQAToolset` can serve: tool calls that need no earlier call of the episode.

    The tool server is stateless (each call is answered as an episode's first turn), so a protocol
    whose tools depend on the episode so far cannot be served: ``open`` reads a document an earlier
    search showed (``can_open``), and numbers that continue across searches (``episode_numbering``)
    would restart at each call while the reward's replay continues them. Of the built-in protocols
    that leaves ``tools``; a tool-call protocol registered later is served when its class has neither.
    """
    return protocol_names(native_tools=True, can_open=False, episode_numbering=False)


class SearchQASettings(BaseConfig):
    """The environment's settings, shared by the taskset (``--env.taskset.*``) and its tool server."""

    dataset: str = Field("synthetic-2hop", description="Task name or QA JSONL file.")
    split: str = Field("dev", description="Split of a named task (the split a QA file is read as).")
    index: str = Field("bm25", description="Index folder, retrieval server URL, or bm25/dense over the corpus.")
    corpus: str | None = Field(None, description="Corpus file for bm25/dense (default: the task's own).")
    protocol: str = Field("tools", description="Tool-call protocol: tools (search, answer), or one registered "
                                               "without open or numbers across searches.")
    reward: str = Field("default", description="Reward preset.")
    top_k: int = Field(3, ge=1, description="Documents per search.")
    max_turns: int = Field(4, ge=1, description="Turn budget per question (the rollout stops there).")
    max_doc_chars: int | None = Field(None, ge=1, description="Characters kept of each document.")


class SearchQAToolsetConfig(SearchQASettings, vf.SharedToolsetConfig):
    """The shared tool server's config: the settings plus where it runs."""


class SearchQAConfig(SearchQASettings, vf.TasksetConfig):
    """``--env.taskset.*``: the settings, for the questions, the tools and the reward alike."""


class SearchQAData(vf.TaskData):
    """One question: its position in the split, its id and the settings (the answers stay in the environment)."""

    example_index: int
    example_id: str
    settings: dict[str, Any] = Field(default_factory=dict)


def _settings(config: SearchQASettings) -> str:
    """The settings as a key: one opened environment per distinct settings and process."""
    return json.dumps({name: getattr(config, name) for name in SearchQASettings.model_fields}, sort_keys=True)


@functools.cache
def _opened(key: str) -> tuple[list[QAExample], SearchQAEnv]:
    """The questions and one environment over the shared retriever, for settings ``key`` (opened once)."""
    s = json.loads(key)
    servable = _servable_protocols()
    if s["protocol"] not in servable:
        raise ValueError(f"protocol must be one of {', '.join(servable)} (tool calls the stateless tool server can "
                         f"answer one at a time: no open, no numbers across searches), got {s['protocol']!r}")
    examples, corpus_path = resolve_task(s["dataset"], s["split"], s["corpus"])
    retriever = shared_retriever(s["index"], corpus_path)
    check_evidence(retriever, examples, s["dataset"], s["index"])
    kwargs: dict[str, Any] = {"protocol": s["protocol"], "reward": s["reward"], "top_k": s["top_k"],
                              "max_turns": s["max_turns"]}
    if s["max_doc_chars"] is not None:
        kwargs["max_doc_chars"] = s["max_doc_chars"]
    return examples, SearchQAEnv(examples, retriever=retriever, **kwargs)


def episode(config: SearchQASettings, index: int, turns: Sequence[str]) -> tuple[float, dict[str, Any]]:
    """Play ``turns`` (assistant turns as text) on question ``index``: the return and the final info.

    Turns after the episode ends are not played; an episode the turns leave running is ended
    unanswered (``truncated_by="no_more_turns"``), as a caller ends one whose model stopped.
    """
    _, env = _opened(_settings(config))
    env.reset(options={"index": index})
    total, done = 0.0, False
    info: Mapping[str, Any] = {}
    for turn in turns:
        _, reward, terminated, truncated, info = env.step(turn)
        total += float(reward)
        if terminated or truncated:
            done = True
            break
    if not done:
        info = env.end_episode("no_more_turns")
    return total, dict(info)


def oracle_calls(example: QAExample) -> list[tuple[str, dict[str, Any]]]:
    """The oracle's tool calls: search each hop's question (or the question), then answer the gold answer."""
    queries = [sub.question for sub in example.decomposition or ()] or [example.question]
    return [*(("search", {"query": q}) for q in queries), ("answer", {"answer": example.answers[0]})]


def _call_turn(name: str, arguments: Any, content: str = "") -> str:
    """One tool call as the assistant turn the ``tools`` protocol reads."""
    return tool_turn_text(content, [{"function": {"name": name, "arguments": arguments}}])


def _turns(trace: vf.Trace) -> list[str]:
    """The trace's assistant turns as text, each tool call with its id (how a served model's calls reach the env)."""
    turns = []
    for message in trace.messages:
        if message.role != "assistant":
            continue
        calls = [{"id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
                 for c in message.tool_calls or ()]
        turns.append(tool_turn_text(message.content or "", calls, ids=True))
    return turns


class SearchQATask(vf.Task[SearchQAData]):
    """One question; the reward is the episode return of its transcript in ``SearchQA-v0``."""

    @property
    def settings(self) -> SearchQASettings:
        """The settings the question was loaded with."""
        return SearchQASettings.model_validate(self.data.settings)

    def _replay(self, trace: vf.Trace) -> tuple[float, dict[str, Any]]:
        return _replayed(_settings(self.settings), self.data.example_index, tuple(_turns(trace)))

    @vf.reward
    async def episode_return(self, trace: vf.Trace) -> float:
        """The sum of the environment's step rewards over the transcript."""
        return self._replay(trace)[0]

    @vf.metric
    async def em(self, trace: vf.Trace) -> float:
        """Exact match of the answer."""
        return float(self._replay(trace)[1]["summary"]["em"])

    @vf.metric
    async def f1(self, trace: vf.Trace) -> float:
        """Token F1 of the answer."""
        return float(self._replay(trace)[1]["summary"]["f1"])

    @vf.metric
    async def searches(self, trace: vf.Trace) -> float:
        """Search calls made."""
        return float(self._replay(trace)[1]["summary"]["searches"])

    @vf.metric
    async def evidence_recall(self, trace: vf.Trace) -> float:
        """Share of the gold documents retrieved (0 for a question without gold evidence)."""
        recall = self._replay(trace)[1]["summary"]["evidence_recall"]
        return 0.0 if recall is None else float(recall)

    @vf.stop
    def episode_over(self, trace: vf.Trace) -> bool:
        """Stop once the model has called ``answer`` or used the turn budget."""
        config = self.settings
        turns = [m for m in trace.messages if m.role == "assistant"]
        answered = any(c.name == "answer" for m in turns for c in m.tool_calls or ())
        return answered or len(turns) >= config.max_turns

    async def validate(self, runtime: Any) -> bool | None:
        """Replay the oracle through the reward: valid when its gold answer scores EM 1 and a positive return.

        The oracle's calls go through the same path as a model's (tool-call JSON, the protocol's
        parser, the answer check and the reward), so an answer the scorer cannot accept, or a reward
        that does not pay for it, fails here. Whether the oracle's searches retrieved every gold
        document (``evidence_recall``) depends on the index and is not part of the check.
        """
        config = self.settings
        examples, _ = _opened(_settings(config))
        turns = [_call_turn(name, args) for name, args in oracle_calls(examples[self.data.example_index])]
        total, info = episode(config, self.data.example_index, turns)
        return bool(info["summary"]["em"] == 1.0 and total > 0.0)


@functools.lru_cache(maxsize=4096)
def _replayed(key: str, index: int, turns: tuple[str, ...]) -> tuple[float, dict[str, Any]]:
    """:func:`episode`, once per transcript (the reward and each metric read the same replay)."""
    return episode(SearchQASettings.model_validate_json(key), index, turns)


class SearchQATaskset(vf.Taskset[SearchQATask, SearchQAConfig]):
    """The questions of one task split, served with :class:`SearchQAToolset`."""

    def load(self) -> Iterator[SearchQATask]:
        """One task per question, its prompt the environment's system and user message."""
        key = _settings(self.config)
        examples, env = _opened(key)
        for index, example in enumerate(examples):
            env.reset(options={"index": index})
            system, user = env.messages()[:2]
            yield SearchQATask(SearchQAData(example_index=index, example_id=example.id, id=example.id,
                                            name=example.id, system_prompt=system["content"],
                                            prompt=user["content"], settings=json.loads(key)), self.config.task)

    @classmethod
    def toolsets(cls, config: SearchQAConfig) -> list[vf.Toolset]:
        """One tool server for all rollouts of a worker."""
        return [SearchQAToolset(SearchQAToolsetConfig(**json.loads(_settings(config))))]


class SearchQAToolset(vf.Toolset[SearchQAToolsetConfig, vf.State]):
    """``search`` and ``answer`` as the ``tools`` protocol declares them; the environment reads each call."""

    TOOL_PREFIX = None

    def register(self, mcp: MCPServer) -> None:
        """Publish the protocol's own schemas and answer calls through the environment."""
        server: Any = mcp
        server.list_tools = self.list_tools
        server.call_tool = self.call_tool

    async def list_tools(self, *args: Any, **kwargs: Any) -> list[Tool]:
        """The protocol's tools, with their JSON schemas."""
        _, env = _opened(_settings(self.config))
        return [Tool(name=t["function"]["name"], description=t["function"]["description"],
                     input_schema=t["function"]["parameters"]) for t in env.protocol.tools]

    async def call_tool(self, name: str, arguments: Any, context: Any = None, *args: Any,
                        **kwargs: Any) -> CallToolResult:
        """One call read and answered by the environment (as an episode's first turn)."""
        _, env = _opened(_settings(self.config))
        env.reset(options={"index": 0})
        _, _, terminated, _, info = env.step(_call_turn(name, arguments))
        if terminated and info.get("action_type") == "answer":
            text = "Answer received."
        else:
            text = str(env.messages()[-1]["content"])
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              is_error=info.get("invalid_reason") is not None)


class SearchQAEnvConfig(vf.EnvConfig):
    """The single-agent env with the ``subprocess`` runtime as its default (verifiers' default is Prime's)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class SearchQAVerifiersEnv(vf.Env[SearchQAEnvConfig]):
    """One ``agent`` seat playing each question (verifiers' single-agent env, run locally by default)."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        """Let the agent play the question."""
        await agents.agent.run(task)


class SearchQAHarness(NullHarness):
    """verifiers' chat loop with the tools; on the ``subprocess`` runtime run by this Python (no ``uv``)."""

    async def setup(self, runtime: Any) -> None:
        """Nothing to install on the ``subprocess`` runtime (this environment has the loop's packages)."""
        if runtime.type != "subprocess":
            await super().setup(runtime)

    async def launch(self, ctx: Any, trace: vf.Trace, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData,
                     tool_interception_url: str | None = None) -> vf.ProgramResult:
        """Run the chat loop against the rollout's model endpoint with the task's tools."""
        if runtime.type != "subprocess":
            return await super().launch(ctx, trace, runtime, endpoint, secret, mcp_urls, data,
                                        tool_interception_url)
        system_prompt, prompt = self.resolve_prompt(data)
        args = [f"--base-url={endpoint}", f"--api-key={secret}", f"--model={ctx.model}"]
        if tool_interception_url:
            args.append(f"--tool-interception-url={tool_interception_url}")
        if system_prompt:
            args.append(f"--system-prompt={system_prompt}")
        if mcp_urls:
            servers = {name: {"url": url, "timeout": self.config.tool_timeout} for name, url in mcp_urls.items()}
            args.append("--mcp-config=" + json.dumps({"mcpServers": servers}))
        if isinstance(prompt, str):
            args.append(f"--prompt={prompt}")
        elif prompt is not None:
            path = f".vf-initial-messages-{trace.id}.json"
            await runtime.write(path, json.dumps([message_to_wire(m) for m in prompt]).encode())
            args.append(f"--initial-messages-file={path}")
        program = f".vf-searchqa-chat-{uuid.uuid4().hex[:8]}.py"
        await runtime.write(program, CHAT_PROGRAM_SOURCE.encode())
        return await runtime.run_program([sys.executable, program, *args], {**self.config.resolved_env})


if __name__ == "__main__":  # the tool server, as verifiers starts it: python -m searchenv.integrations.verifiers
    SearchQAToolset.run()
