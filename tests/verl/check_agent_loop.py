"""The verl agent loop against the real verl package (run in .venv-verl by tests/test_verl.py).

The file name does not start with ``test_``, so the main suite (without verl) does not collect
it. The only stand-in is verl's generation server manager (vLLM/SGLang need a GPU): a scripted
one that plays search-then-answer from the token ids it is given.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from tests.conftest import DOCS, EXAMPLES
from tests.tiny_model import build_tiny_tokenizer
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry
from verl.workers.rollout.replica import TokenOutput

from agents.integrations.verl import SearchQAAgentLoop
from searchenv.env import SearchQAEnv
from searchenv.retrievers.base import RetrieverError
from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.tasks.rows import task_rows

TOBIN = next(ex for ex in EXAMPLES if ex.question == "Where was Tobin Quenn born?")


class ScriptedServer:
    """Stands in for verl's server manager: search the question once, then answer; records requests."""

    def __init__(self, tokenizer: Any, answer: str = "Karsk") -> None:
        self.tokenizer = tokenizer
        self.answer = answer
        self.requests: list[dict[str, Any]] = []

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        self.requests.append({"prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params),
                              "request_id": request_id, **kwargs})
        context = self.tokenizer.decode(prompt_ids)
        after = context.split("Question:")[-1]
        text = f"<search> {TOBIN.question} </search>" if "<information>" not in after else \
            f"<answer> {self.answer} </answer>"
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: sampling_params["max_tokens"]]
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids))


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("verl") / "idx"
    BM25Retriever.build(DOCS, folder)
    return str(folder)


def _run(loop: SearchQAAgentLoop, params: dict[str, Any], row: dict[str, Any]) -> Any:
    return loop.loop.run_until_complete(loop.run(params, **row))  # verl runs a loop on the loop it was built on


def _loop(index: str, tokenizer: Any, server: Any, response_length: int = 512, **settings: Any) -> SearchQAAgentLoop:
    asyncio.set_event_loop(asyncio.new_event_loop())
    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": 1024, "response_length": response_length}},
        "searchenv": {"retriever": index, "max_turns": 3, "top_k": 2, "max_new_tokens": 64, **settings},
    })
    return SearchQAAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
                             processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})))


def test_registered_for_verl() -> None:
    assert _agent_loop_registry["searchqa_agent"] == {"_target_": "agents.integrations.verl.SearchQAAgentLoop"}


def test_episode_is_token_exact_masked_and_scored_by_searchenv(index: str) -> None:
    tokenizer = build_tiny_tokenizer()
    server = ScriptedServer(tokenizer)
    loop = _loop(index, tokenizer, server)
    [row] = task_rows([TOBIN], data_source="searchenv/test", split="train")
    out = _run(loop, {"temperature": 1.0, "top_p": 1.0, "logprobs": True}, row)

    plain = SearchQAEnv([TOBIN], retriever=index, max_turns=3, top_k=2)
    plain.reset(options={"index": 0})
    want = tokenizer.apply_chat_template(plain.messages()[:2], add_generation_prompt=True, tokenize=True)
    want = want["input_ids"] if hasattr(want, "keys") else want
    assert out.prompt_ids == list(want)
    search, answer = f"<search> {TOBIN.question} </search>", "<answer> Karsk </answer>"
    _, r1, _, _, info1 = plain.step(search)
    _, r2, done, _, _ = plain.step(answer)
    assert done and out.reward_score == pytest.approx(float(r1) + float(r2))
    gen = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    env = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0]
    encode = tokenizer.encode
    assert gen == encode(search, add_special_tokens=False) + encode(answer, add_special_tokens=False)
    assert env == tokenizer.encode(info1["new_text"], add_special_tokens=False)  # the reply, encoded once
    assert [lp for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m == 1] == [-0.25] * len(gen)
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m == 0)
    assert out.extra_fields["searchenv_metrics"]["em"] == 1.0 and out.num_turns == 4
    # every request continued the episode's own ids and asked for the protocol's stop strings
    first, second = server.requests
    assert second["prompt_ids"] == out.prompt_ids + out.response_ids[: len(second["prompt_ids"]) - len(out.prompt_ids)]
    assert first["sampling_params"]["stop"] == ["</search>", "</answer>"]
    assert first["sampling_params"]["include_stop_str_in_output"] is True
    assert first["sampling_params"]["max_tokens"] == 64


class NoBackend:
    """The tiny tokenizer seen without its Rust backend (as a slow tokenizer has none)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        if name == "backend_tokenizer":
            raise AttributeError(name)
        return getattr(self._tokenizer, name)


def test_replies_are_encoded_on_worker_threads_with_the_same_ids(index: str) -> None:
    tokenizer = build_tiny_tokenizer()
    fast = _loop(index, tokenizer, ScriptedServer(tokenizer))
    # its own copy of the backend, which nobody reconfigures while verl's threads use the shared one
    assert fast._reply_tokenizer is not None and fast._reply_tokenizer is not tokenizer.backend_tokenizer
    # verl builds a loop per sample: the copy is made once per tokenizer, not per loop
    assert _loop(index, tokenizer, ScriptedServer(tokenizer))._reply_tokenizer is fast._reply_tokenizer
    slow = _loop(index, NoBackend(tokenizer), ScriptedServer(tokenizer))
    assert slow._reply_tokenizer is None  # encoded with the tokenizer itself, one thread at a time
    rows = task_rows(EXAMPLES, data_source="searchenv/test", split="train")
    a, b = _run_all(fast, rows), _run_all(slow, rows)
    assert [(o.response_ids, o.response_mask) for o in a] == [(o.response_ids, o.response_mask) for o in b]


class BrowseServer(ScriptedServer):
    """Search, open the first document, answer: the ``browse`` protocol through verl's loop."""

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        self.requests.append({"prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params)})
        seen = self.tokenizer.decode(prompt_ids).split("Question:")[-1].count("<information>")
        text = [f"<search> {TOBIN.question} </search>", "<open> 1 </open>", "<answer> Karsk </answer>"][min(seen, 2)]
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids))


def test_browse_opens_run_through_the_loop_masked_out(index: str) -> None:
    tokenizer = build_tiny_tokenizer()
    server = BrowseServer(tokenizer)
    loop = _loop(index, tokenizer, server, protocol="browse")
    [row] = task_rows([TOBIN], data_source="searchenv/test", split="train")
    out = _run(loop, {"temperature": 1.0}, row)
    assert "</open>" in server.requests[0]["sampling_params"]["stop"]
    metrics = out.extra_fields["searchenv_metrics"]
    assert metrics["opens"] == 1.0 and metrics["em"] == 1.0 and out.num_turns == 6
    env_text = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0])
    assert "page 1 of 1" in env_text  # the opened page is environment text


class ToolsServer(ScriptedServer):
    """Plays search-then-answer as Hermes/Qwen tool calls (``protocol="tools"``)."""

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        self.requests.append({"prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params)})
        seen = self.tokenizer.decode(prompt_ids).count("<tool_response>")
        call = {"name": "search", "arguments": {"query": TOBIN.question}} if seen == 0 else \
            {"name": "answer", "arguments": {"answer": "Karsk"}}
        text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids))


def test_tool_calls_run_through_the_loop_with_the_templates_markup(index: str) -> None:
    from tests.tiny_model import TOOLS_CHAT_TEMPLATE

    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = TOOLS_CHAT_TEMPLATE
    server = ToolsServer(tokenizer)
    loop = _loop(index, tokenizer, server, protocol="tools", max_new_tokens=160)  # a whole call in one turn
    [row] = task_rows([TOBIN], data_source="searchenv/test", split="train")
    out = _run(loop, {"temperature": 1.0}, row)
    assert server.requests[0]["sampling_params"]["stop"] == ["</tool_call>"]
    assert out.extra_fields["searchenv_metrics"]["em"] == 1.0
    env_text = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0],
                                skip_special_tokens=False)
    assert env_text.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\nDoc 1(Title: Tobin Quenn)")
    assert env_text.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")


class LockstepServer(ScriptedServer):
    """Answers a round of ``n`` concurrent requests together, as a generation server returns a batch."""

    def __init__(self, tokenizer: Any, n: int) -> None:
        super().__init__(tokenizer)
        self.n, self.arrived = n, 0
        self.gate: asyncio.Event | None = None

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        if self.gate is None:
            self.gate = asyncio.Event()
        gate, self.arrived = self.gate, self.arrived + 1
        if self.arrived == self.n:  # the round is complete: release it, open the next
            self.arrived, self.gate = 0, None
            gate.set()
        await gate.wait()
        return await super().generate(request_id=request_id, prompt_ids=prompt_ids,
                                      sampling_params=sampling_params, **kwargs)


def _run_all(loop: SearchQAAgentLoop, rows: list[dict[str, Any]]) -> list[Any]:
    async def gather() -> list[Any]:  # every sample at once, as verl's agent-loop worker runs them
        return list(await asyncio.gather(*(loop.run({"temperature": 1.0}, **row) for row in rows)))

    return loop.loop.run_until_complete(gather())


def test_concurrent_episodes_search_in_one_call_with_the_same_results(index: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = build_tiny_tokenizer()
    rows = task_rows(EXAMPLES[:4], data_source="searchenv/test", split="train")
    calls: list[int] = []
    search_batch = BM25Retriever.search_batch

    def counted(self: BM25Retriever, queries: list[str], k: int) -> Any:
        calls.append(len(queries))
        return search_batch(self, queries, k)

    monkeypatch.setattr(BM25Retriever, "search_batch", counted)
    outs, searches = {}, {}
    for batch in (True, False):
        calls.clear()
        outs[batch] = _run_all(_loop(index, tokenizer, LockstepServer(tokenizer, 4), batch_searches=batch), rows)
        searches[batch] = list(calls)
    assert searches[False] == [1, 1, 1, 1] and searches[True] == [4]  # one call for the round's four searches
    for a, b in zip(outs[True], outs[False], strict=True):  # token for token the same episodes
        assert (a.prompt_ids, a.response_ids, a.response_mask, a.reward_score) == \
            (b.prompt_ids, b.response_ids, b.response_mask, b.reward_score)

    def failing(self: BM25Retriever, queries: list[str], k: int) -> Any:
        raise RetrieverError("index went away")

    monkeypatch.setattr(BM25Retriever, "search_batch", failing)  # a failed batch: each episode's infra error
    outs[True] = _run_all(_loop(index, tokenizer, LockstepServer(tokenizer, 4)), rows)
    assert [o.extra_fields["searchenv_metrics"]["infra_errors"] for o in outs[True]] == [1.0] * 4


def test_one_request_id_per_episode_for_sticky_routing(index: str) -> None:
    # verl's server manager sends every request with one id to the same server, whose prefix cache
    # then holds the episode's earlier turns: all turns of an episode share an id, episodes differ
    tokenizer = build_tiny_tokenizer()
    server = ScriptedServer(tokenizer)
    loop = _loop(index, tokenizer, server)
    [row] = task_rows([TOBIN], data_source="searchenv/test", split="train")
    _run(loop, {"temperature": 1.0}, row)
    _run(loop, {"temperature": 1.0}, {**row, "priority": 7})
    first, second = server.requests[:2], server.requests[2:]
    assert len(first) == len(second) == 2
    assert first[0]["request_id"] == first[1]["request_id"] != second[0]["request_id"] == second[1]["request_id"]
    assert "priority" not in first[0] and [r["priority"] for r in second] == [7, 7]  # vLLM schedules by it

    server = ScriptedServer(tokenizer)  # full determinism: the id is the sample's priority, as in verl's loops
    loop = _loop(index, tokenizer, server)
    loop.rollout_config.full_determinism = True
    _run(loop, {"temperature": 1.0}, {**row, "priority": 3})
    assert [r["request_id"] for r in server.requests] == ["det-3", "det-3"]


class VersionedServer(ScriptedServer):
    """A server manager whose weights move on between an episode's turns (as under verl's async trainers)."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.version = 4

    async def generate(self, **kwargs: Any) -> TokenOutput:
        out = await super().generate(**kwargs)
        self.version += 1
        # what verl's LLMServerClient hands back: the server's weight version, and min/max set from it
        steps = self.version - 1
        return out.model_copy(update={"extra_fields": {"global_steps": steps, "min_global_steps": steps,
                                                       "max_global_steps": steps}})


def test_the_weight_versions_of_the_turns_reach_verls_trainer(index: str) -> None:
    # verl's v1 trainer reads min_global_steps and max_global_steps of every sample (int(None) fails)
    tokenizer = build_tiny_tokenizer()
    loop = _loop(index, tokenizer, VersionedServer(tokenizer))
    [row] = task_rows([TOBIN], data_source="searchenv/test", split="train")
    out = _run(loop, {"temperature": 1.0}, row)
    assert {k: out.extra_fields[k] for k in ("global_steps", "min_global_steps", "max_global_steps")} == \
        {"global_steps": 4, "min_global_steps": 4, "max_global_steps": 5}  # first turn's, then the last turn's max


def test_the_response_budget_ends_the_episode_unanswered(index: str) -> None:
    tokenizer = build_tiny_tokenizer()
    loop = _loop(index, tokenizer, ScriptedServer(tokenizer), response_length=20)
    [row] = task_rows([TOBIN], data_source="searchenv/test", split="train")
    out = _run(loop, {"temperature": 1.0}, row)
    assert len(out.response_ids) <= 20 and len(out.response_mask) == len(out.response_ids)
    assert out.extra_fields["searchenv_metrics"]["answered"] == 0.0


def test_environments_are_pooled_and_settings_checked(index: str, tmp_path: Path) -> None:
    from agents.integrations import verl as adapter

    tokenizer = build_tiny_tokenizer()
    loop = _loop(index, tokenizer, ScriptedServer(tokenizer))
    [row] = task_rows([TOBIN], data_source="searchenv/test", split="train")
    _run(loop, {}, row)
    pooled = [env for envs in adapter._POOL.values() for env in envs]
    _run(loop, {}, row)
    assert [env for envs in adapter._POOL.values() for env in envs] == pooled  # reused, not rebuilt
    bad = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 8, "response_length": 8}},
                            "searchenv": {"retriever": index, "topk": 3}})
    with pytest.raises(ValueError, match="unknown searchenv setting"):
        SearchQAAgentLoop(trainer_config=DictConfigWrap(bad), server_manager=None, tokenizer=tokenizer,
                          processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})))


def test_the_shipped_grpo_config_composes_with_verls_own_configs() -> None:
    import hydra.utils
    from hydra import compose, initialize_config_dir

    docs = Path(__file__).resolve().parents[2] / "docs" / "engines" / "verl"
    with initialize_config_dir(config_dir=str(docs), version_base=None):
        cfg = compose(config_name="searchqa_grpo")
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.data.return_raw_chat
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "searchqa_agent"
    assert cfg.searchenv.reward == "r3-rag" and "ppo_mini_batch_size" in cfg.actor_rollout_ref.actor
    [entry] = OmegaConf.load(docs / "agent_loops.yaml")
    assert entry.name == "searchqa_agent"
    assert hydra.utils.get_class(entry._target_) is SearchQAAgentLoop


def test_an_episode_whose_retrieval_failed_is_masked_out_and_scores_zero(index: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(self: BM25Retriever, queries: list[str], k: int) -> Any:
        raise RetrieverError("index went away")

    monkeypatch.setattr(BM25Retriever, "search_batch", failing)
    tokenizer = build_tiny_tokenizer()
    [row] = task_rows([TOBIN], data_source="searchenv/test", split="train")
    out = _run(_loop(index, tokenizer, ScriptedServer(tokenizer)), {"temperature": 1.0}, row)
    assert out.extra_fields["searchenv_metrics"]["infra_errors"] == 1.0
    assert out.extra_fields["reward_extra_info"]["infra_errors"] == 1.0
    assert len(out.response_ids) > 0 and out.response_mask == [0] * len(out.response_ids)  # nothing to learn
    assert out.reward_score == 0.0 and set(out.extra_fields["turn_scores"]) == {0.0}  # the per-turn scores too


def test_episode_metrics_and_timings_are_what_verl_logs(index: str) -> None:
    from agents.integrations.verl import REWARD_EXTRA_KEYS

    tokenizer = build_tiny_tokenizer()
    rows = task_rows(EXAMPLES, data_source="searchenv/test", split="train")
    outs = _run_all(_loop(index, tokenizer, LockstepServer(tokenizer, len(rows))), rows)
    for out in outs:
        # verl takes the first sample's reward_extra_info keys for the batch: every sample has the same ones
        assert tuple(out.extra_fields["reward_extra_info"]) == REWARD_EXTRA_KEYS
        assert {"em", "f1", "searches", "invalid_turns", "infra_errors"} <= set(REWARD_EXTRA_KEYS)
        info, metrics = out.extra_fields["reward_extra_info"], out.extra_fields["searchenv_metrics"]
        assert all(info[k] == metrics[k] for k in REWARD_EXTRA_KEYS)
        assert out.metrics.generate_sequences > 0 and out.metrics.tool_calls > 0  # verl's agent_loop/* timings
        # the per-turn rewards (verl's turn_scores) sum to the episode's score
        assert sum(out.extra_fields["turn_scores"]) == pytest.approx(out.reward_score)
        assert len(out.extra_fields["turn_scores"]) == out.num_turns // 2


@pytest.mark.parametrize(("backend", "keep", "other"), [("vllm", "include_stop_str_in_output", "no_stop_trim"),
                                                         ("sglang", "no_stop_trim", "include_stop_str_in_output")])
def test_stop_parameters_follow_verls_rollout_backend(index: str, backend: str, keep: str, other: str) -> None:
    tokenizer = build_tiny_tokenizer()
    server = ScriptedServer(tokenizer)
    loop = _loop(index, tokenizer, server)
    loop.rollout_config.name = backend
    loop.__init__(trainer_config=DictConfigWrap(loop.config), server_manager=server, tokenizer=tokenizer,
                  processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})))
    [row] = task_rows([TOBIN], data_source="searchenv/test", split="train")
    _run(loop, {"temperature": 1.0}, row)
    for request in server.requests:  # SGLang's server hands the parameters to SGLang unchanged
        assert request["sampling_params"][keep] is True and other not in request["sampling_params"]
        assert request["sampling_params"]["stop"] == ["</search>", "</answer>"]


def test_an_unknown_rollout_backend_is_refused(index: str) -> None:
    tokenizer = build_tiny_tokenizer()
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "mystery", "prompt_length": 8,
                                                                 "response_length": 8}},
                               "searchenv": {"retriever": index}})
    with pytest.raises(ValueError, match="rollout backend 'mystery'"):
        SearchQAAgentLoop(trainer_config=DictConfigWrap(config), server_manager=None, tokenizer=tokenizer,
                          processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})))
