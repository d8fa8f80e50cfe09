"""Reference agents through SearchQAEnv: the oracle, the random agent, the batched driver."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.baselines import EpisodeResult, close_answer, make_agent, run_agent, with_system_prompt
from agents.baselines.scripted import ABSTAIN, OracleAgent, RandomAgent, oracle_hops
from searchenv.corpus import write_corpus
from searchenv.protocols import Answer, Invalid, Search, get_protocol
from searchenv.retrievers import retriever_for_corpus
from searchenv.retrievers.base import Hit, RetrieverError
from tests.conftest import DOCS, EXAMPLES


@pytest.fixture()
def bm25(corpus_file: Path):  # type: ignore[no-untyped-def]
    return retriever_for_corpus("bm25", corpus_file)


def _bm25_without(tmp_path: Path, drop: set[str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "partial.jsonl"
    write_corpus(path, [d for d in DOCS if d.id not in drop])
    return retriever_for_corpus("bm25", path)


def _assistant_turns(rec: EpisodeResult) -> list[str]:
    return [m["content"] for m in rec.messages if m["role"] == "assistant"]


def _all_valid(records: Sequence[EpisodeResult], protocol: str = "search-r1") -> None:
    proto = get_protocol(protocol)
    for rec in records:
        turns = _assistant_turns(rec)
        assert turns, rec.example_id
        for text in turns:
            assert not isinstance(proto.parse(text), Invalid), text
        assert all(s["invalid_reason"] is None for s in rec.steps)


class _Spy:
    """Delegates to a real retriever and records every search_batch call."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.calls: list[list[str]] = []

    def search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        return self.inner.search_batch(queries, k)


class _Down:
    def search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        raise RetrieverError("connection refused")


@pytest.mark.parametrize("protocol", ["search-r1", "multi-query"])
def test_oracle_scores_perfectly_when_bm25_finds_the_evidence(bm25, protocol: str) -> None:  # type: ignore[no-untyped-def]
    records = run_agent(OracleAgent(), EXAMPLES, bm25, protocol=protocol, batch_size=3)
    assert [r.example_id for r in records] == [e.id for e in EXAMPLES]
    assert [r.metrics["em"] for r in records] == [1.0] * len(EXAMPLES)
    assert all(r.metrics["evidence_recall"] == 1.0 for r in records)
    _all_valid(records, protocol)
    # every oracle turn reasons first, then acts
    for rec in records:
        for text in _assistant_turns(rec):
            assert text.startswith("<think> ") and "</think>\n<" in text


def test_oracle_follows_the_decomposition_in_order(bm25) -> None:  # type: ignore[no-untyped-def]
    (rec,) = run_agent(OracleAgent(), EXAMPLES[:1], bm25)
    searched = [q for s in rec.steps for q in s["queries"]]
    assert searched == [h.question for h in oracle_hops(EXAMPLES[0])]
    assert rec.answer == "Essaly"
    assert [s["action_type"] for s in rec.steps] == ["search", "search", "search", "answer"]
    # the think of hop 2 states hop 1's answer
    assert "Velora Quenn" in _assistant_turns(rec)[1].split("</think>")[0]


def test_oracle_answers_the_intermediate_it_reached_when_a_hop_fails(tmp_path: Path) -> None:
    retriever = _bm25_without(tmp_path, {"d0"})  # hop 2's evidence is missing
    (rec,) = run_agent(OracleAgent(), EXAMPLES[:1], retriever)
    assert rec.answer == "Velora Quenn"  # hop 1's answer
    assert rec.metrics["em"] == 0.0
    assert [s["action_type"] for s in rec.steps] == ["search", "search", "answer"]
    _all_valid([rec])


def test_oracle_abstains_when_the_first_hop_fails(tmp_path: Path) -> None:
    retriever = _bm25_without(tmp_path, {"d5"})
    (rec,) = run_agent(OracleAgent(), EXAMPLES[:1], retriever)
    assert rec.answer == ABSTAIN
    _all_valid([rec])


def test_oracle_without_decomposition_needs_the_whole_evidence_chain(tmp_path: Path) -> None:
    retriever = _bm25_without(tmp_path, {"d3"})  # q3 compares d0 and d3
    (rec,) = run_agent(OracleAgent(), [EXAMPLES[3]], retriever)
    assert rec.answer == ABSTAIN and rec.metrics["em"] == 0.0


def test_oracle_answers_with_what_it_has_when_the_budget_ends(bm25) -> None:  # type: ignore[no-untyped-def]
    (rec,) = run_agent(OracleAgent(), EXAMPLES[:1], bm25, max_turns=2)
    assert [s["action_type"] for s in rec.steps] == ["search", "answer"]
    assert rec.answer == "Velora Quenn"
    _all_valid([rec])


def test_random_agent_is_valid_seeded_and_independent_of_batch_size(bm25) -> None:  # type: ignore[no-untyped-def]
    a = run_agent(RandomAgent(seed=3), EXAMPLES, bm25, batch_size=4, seed=1)
    b = run_agent(RandomAgent(seed=3), EXAMPLES, bm25, batch_size=1, seed=1)
    assert [r.messages for r in a] == [r.messages for r in b]
    _all_valid(a)
    runs = {
        tuple(tuple(_assistant_turns(r)) for r in run_agent(RandomAgent(seed=s), EXAMPLES, bm25))
        for s in range(4)
    }
    assert len(runs) > 1
    for rec in a:
        assert rec.answer is not None  # it always answers on the last turn at the latest
        assert rec.metrics["turns"] <= 4


def test_random_answers_are_spans_of_retrieved_documents_or_the_question(bm25) -> None:  # type: ignore[no-untyped-def]
    texts = " ".join(f"{d.text}" for d in DOCS) + " " + " ".join(e.question for e in EXAMPLES)
    for seed in range(3):
        for rec in run_agent(RandomAgent(seed=seed), EXAMPLES, bm25):
            assert rec.answer is not None and rec.answer.split()[0] in texts
            for text in _assistant_turns(rec):
                action = get_protocol("search-r1").parse(text)
                if isinstance(action, Search):
                    words = set(rec.question.replace("?", " ").replace(",", " ").split())
                    assert set(action.queries[0].split()) <= words


def test_driver_gathers_all_episodes_queries_into_one_search_call(bm25) -> None:  # type: ignore[no-untyped-def]
    spy = _Spy(bm25)
    records = run_agent(OracleAgent(), EXAMPLES, spy, batch_size=4)
    # round 1: all four episodes search at once; then q0 keeps searching alone
    assert spy.calls[0] == [oracle_hops(e)[0].question for e in EXAMPLES]
    assert len(spy.calls) == 3
    assert sum(len(c) for c in spy.calls) == sum(r.metrics["searches"] for r in records)


def test_driver_reports_retriever_failures_as_infra_errors() -> None:
    records = run_agent(OracleAgent(), EXAMPLES[:2], _Down(), max_turns=3)  # type: ignore[arg-type]
    for rec in records:
        assert rec.steps[0]["infra_error"] is True
        assert rec.metrics["infra_errors"] >= 1
        assert "Search failed" in rec.messages[3]["content"]


def test_driver_rejects_bad_arguments(bm25) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="batch_size"):
        run_agent(OracleAgent(), EXAMPLES, bm25, batch_size=0)
    with pytest.raises(ValueError, match="examples"):
        run_agent(OracleAgent(), [], bm25)


def test_make_agent_names() -> None:
    assert make_agent("oracle").name == "oracle"
    assert make_agent("heuristic").name == "heuristic"
    assert make_agent("random", seed=2).name == "random"
    with pytest.raises(ValueError, match="unknown agent"):
        make_agent("nope")
    with pytest.raises(ValueError, match="needs a policy"):
        make_agent("rag")


def test_with_system_prompt_changes_only_the_prompt() -> None:
    base = get_protocol("multi-query", max_queries=2)
    new = with_system_prompt(base, "Be brief.")
    assert new.system_prompt() == "Be brief." and base.system_prompt() != "Be brief."
    assert new.name == base.name and new.max_queries == 2
    text = "<search>\na\nb\n</search>"
    assert new.parse(text) == base.parse(text) == Search(("a", "b"))


@given(st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=60))
def test_close_answer_yields_a_valid_answer_or_the_turn_unchanged(body: str) -> None:
    turn = "<answer>" + body
    out = close_answer(turn)
    action = get_protocol("search-r1").parse(out)
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if lines:
        assert action == Answer(" ".join(lines[0].split()))
    else:
        assert out == turn and isinstance(action, Invalid)


def test_close_answer_cuts_after_the_closing_tag() -> None:
    assert close_answer("<answer> Essaly </answer> and more") == "<answer> Essaly </answer>"


# ---- LLM-prompted reference agents, with the tiny random model (garbage text, real pipeline) ----


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    pytest.importorskip("transformers")
    from tests.tiny_model import tiny_policy

    return tiny_policy(0)


def test_direct_agent_answers_in_one_turn_without_searching(tiny, bm25) -> None:  # type: ignore[no-untyped-def]
    records = run_agent(make_agent("direct", policy=tiny, max_new_tokens=8), EXAMPLES[:3], bm25)
    for rec in records:
        assert len(rec.steps) == 1 and rec.metrics["searches"] == 0
        assert rec.steps[0]["generated_tokens"] > 0
        assert _assistant_turns(rec)[0].startswith("<answer>")
        assert rec.messages[0]["content"].startswith("Answer the question with a short answer")


def test_rag_agent_searches_the_question_then_answers(tiny, bm25) -> None:  # type: ignore[no-untyped-def]
    spy = _Spy(bm25)
    records = run_agent(make_agent("rag", policy=tiny, max_new_tokens=8), EXAMPLES[:3], spy)
    assert spy.calls[0] == [e.question for e in EXAMPLES[:3]]  # one batched retrieval for all
    for rec in records:
        assert rec.steps[0]["action_type"] == "search" and rec.steps[0]["generated_tokens"] == 0
        assert len(rec.steps) == 2 and _assistant_turns(rec)[1].startswith("<answer>")
        assert rec.metrics["evidence_recall"] is not None


@pytest.mark.parametrize("name", ["iterative", "llm"])
def test_free_form_llm_agents_run_through_the_env(tiny, bm25, name: str) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(name, policy=tiny, max_new_tokens=8)
    records = run_agent(agent, EXAMPLES[:2], bm25, max_turns=2)
    system = records[0].messages[0]["content"]
    assert system.startswith(get_protocol("search-r1").system_prompt())
    assert ("Example:" in system) == (name == "iterative")
    for rec in records:
        assert 1 <= len(rec.steps) <= 2
        assert all(0 < s["generated_tokens"] <= 8 for s in rec.steps)
        assert rec.metrics["generated_tokens"] == sum(s["generated_tokens"] for s in rec.steps)


def test_llm_agent_context_keeps_generated_ids_as_generated(tiny, bm25) -> None:  # type: ignore[no-untyped-def]
    from agents.baselines import EpisodeState, LLMAgent

    agent = LLMAgent("llm", tiny, max_new_tokens=6)
    proto = get_protocol("search-r1")
    ep = EpisodeState(0, EXAMPLES[1], proto, 4, 7, [
        {"role": "system", "content": proto.system_prompt()},
        {"role": "user", "content": proto.user_prompt(EXAMPLES[1].question)},
    ])
    prompt = tiny.chat_prompt_ids(ep.messages)
    (turn,) = agent.act([ep], seed=0)
    gen = tiny.generate([prompt], stop=proto.stop, max_new_tokens=6, temperature=0.0)[0]
    assert turn.text == gen.text and turn.generated_tokens == len(gen.token_ids)
    assert ep.memory["ids"] == prompt + list(gen.token_ids)


def test_eval_table_with_llm_agents(tiny, corpus_file: Path) -> None:  # type: ignore[no-untyped-def]
    from agents.evaluation.evaluate import compare, markdown_table

    results = compare(
        ["direct", "rag", "llm"], ["bm25"], task=EXAMPLES[:2], corpus=corpus_file, policy=tiny,
        max_new_tokens=6, max_turns=2,
    )
    table = markdown_table(results)
    assert [r.agent for r in results] == ["direct", "rag", "llm"]
    assert all(r.row["gen_tokens"] > 0 for r in results)
    assert table.count("| bm25 | 2 |") == 3


def test_heuristic_agent_reads_only_the_question_and_what_it_retrieved(tmp_path: Path) -> None:
    from dataclasses import replace

    from agents.baselines.scripted import HeuristicAgent
    from searchenv.tasks import read_qa_jsonl
    from searchenv.tasks.synthetic import QuestionConfig, SyntheticTaskConfig, write_world
    from searchenv.tasks.world.world import WorldConfig

    cfg = SyntheticTaskConfig(
        WorldConfig(num_passages=3000, seed=5),
        QuestionConfig(mix=(("single", 1.0), ("bridge2", 1.0), ("comparison", 1.0)), train=30, dev=30, test=30),
    )
    write_world(cfg, tmp_path / "w")
    dev = read_qa_jsonl(tmp_path / "w" / "dev.jsonl")
    bm25 = retriever_for_corpus("bm25", tmp_path / "w" / "corpus.jsonl")
    records = run_agent(HeuristicAgent(), dev, bm25, max_turns=4, top_k=3)
    _all_valid(records)
    em = sum(r.metrics["em"] for r in records) / len(records)
    rand = sum(r.metrics["em"] for r in run_agent(RandomAgent(seed=1), dev, bm25, max_turns=4, top_k=3)) / len(dev)
    assert em > rand + 0.2, (em, rand)
    # Bridge questions get a follow-up search; single-hop ones do not.
    for ex, rec in zip(dev, records, strict=True):
        searches = sum(1 for s in rec.steps if s["action_type"] == "search")
        if ex.type == "single-hop":
            assert searches == 1
        elif ex.type == "bridge":
            assert searches in (1, 2)
    # No gold data is read: blanking answers, evidence and decomposition changes no turn.
    blind = [replace(ex, answers=("x",), evidence_ids=(), decomposition=(), metadata={}) for ex in dev]
    blind_records = run_agent(HeuristicAgent(), blind, bm25, max_turns=4, top_k=3)
    assert [_assistant_turns(r) for r in blind_records] == [_assistant_turns(r) for r in records]


@pytest.mark.parametrize(
    ("question", "hops"),
    [
        ("Where was Tobin Quenn born?", 1),
        ("What is the capital of Essaly?", 1),
        ("By whom was the company Wralumax Group founded?", 1),
        ("Who founded the employer of Queliwyn Drokumatch?", 2),
        ("What is the alma mater of the founder of Brakarent Works?", 2),
        (
            "In which country is the home city of the university where the person who founded Tolveorix Group "
            "studied located?",
            4,
        ),
    ],
)
def test_estimate_hops(question: str, hops: int) -> None:
    from agents.baselines.rule_reader import estimate_hops

    assert estimate_hops(question) == hops


def test_oracle_searches_independent_hops_together_under_multi_query(bm25) -> None:  # type: ignore[no-untyped-def]
    """RAG-R1: a comparison's two lookups go in one turn; a bridge's next hop waits for its answer."""
    from searchenv.tasks import QAExample, SubQuestion

    comparison = QAExample(
        "c0", "Who was born first, Velora Quenn or Tobin Quenn?", ("Velora Quenn",), ("d0", "d3"),
        (SubQuestion("When was Velora Quenn born?", "1931", ("d0",)),
         SubQuestion("When was Tobin Quenn born?", "1940", ("d3",))), "comparison", 2)
    bridge = EXAMPLES[0]
    mq = {r.example_id: r for r in run_agent(OracleAgent(), [comparison, bridge], bm25, protocol="multi-query")}
    assert [s["queries"] for s in mq["c0"].steps[:1]] == [["When was Velora Quenn born?", "When was Tobin Quenn born?"]]
    assert mq["c0"].metrics["em"] == 1.0 and mq["c0"].metrics["turns"] == 2
    assert all(len(s["queries"]) <= 1 for s in mq["q0"].steps) and mq["q0"].metrics["em"] == 1.0
    one = {r.example_id: r for r in run_agent(OracleAgent(), [comparison, bridge], bm25, protocol="search-r1")}
    assert one["c0"].metrics["turns"] == 3 and one["c0"].metrics["em"] == 1.0
    narrow = run_agent(OracleAgent(), [comparison], bm25, protocol=get_protocol("multi-query", max_queries=1))[0]
    assert narrow.metrics["turns"] == 3  # the protocol's max_queries bounds a turn


def test_heuristic_searches_a_comparisons_options_together_under_multi_query(bm25) -> None:  # type: ignore[no-untyped-def]
    from agents.baselines.scripted import HeuristicAgent

    q3 = next(e for e in EXAMPLES if e.id == "q3")
    mq = run_agent(HeuristicAgent(), [q3], bm25, protocol="multi-query")[0]
    one = run_agent(HeuristicAgent(), [q3], bm25, protocol="search-r1")[0]
    assert [len(s["queries"]) for s in mq.steps if s["action_type"] == "search"] == [1, 2]
    assert [len(s["queries"]) for s in one.steps if s["action_type"] == "search"] == [1, 1, 1]
    assert mq.answer == one.answer and mq.metrics["turns"] == one.metrics["turns"] - 1


class _RecordingPolicy:
    """A stand-in model with a byte-level BPE tokenizer that merges ``\\n\\n`` (as SmolLM2's does):
    records every prompt and answers each with a fixed completion."""

    def __init__(self, reply: str) -> None:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast

        from tests.tiny_model import CHAT_TEMPLATE

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        texts = [f"{d.title}\n\n{d.text}\n\n<answer> x </answer>\n\n<information> </information>\n\n" for d in DOCS]
        tok.train_from_iterator(texts * 3, trainer)
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                                 pad_token="<|endoftext|>", clean_up_tokenization_spaces=False)
        self.tokenizer.chat_template = CHAT_TEMPLATE
        self.reply = reply
        self.prompts: list[list[int]] = []

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=False))

    def chat_prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        from agents.policies.base import chat_template_ids

        return chat_template_ids(self.tokenizer, messages)

    def generate(self, prompts, **kwargs):  # type: ignore[no-untyped-def]
        from agents.policies.base import Generation

        self.prompts.extend([list(p) for p in prompts])
        ids = tuple(self.encode(self.reply))
        return [Generation(self.reply, ids, None, "stop") for _ in prompts]


@pytest.mark.parametrize("name", ["rag", "direct"])
def test_answer_slot_prompts_are_the_tokenizers_own_encoding_of_their_text(bm25, name: str) -> None:  # type: ignore[no-untyped-def]
    # A text-only model server (transformers serve) re-encodes the prompt's text: the agent's ids
    # must be what the tokenizer makes of that text, or the served model sees other tokens. rag's
    # information block ends in a blank line and "<answer>" follows: encoded apart, "\n\n" is one
    # token; in one string, two.
    policy = _RecordingPolicy(" Essaly </answer>")
    pieces = policy.encode("</information>\n\n") + policy.encode("<answer>")
    assert pieces != policy.encode("</information>\n\n<answer>")
    records = run_agent(make_agent(name, policy=policy), EXAMPLES[:3], bm25)  # type: ignore[arg-type]
    assert [r.answer for r in records] == ["Essaly"] * 3
    assert len(policy.prompts) == 3
    for prompt in policy.prompts:
        text = policy.decode(prompt)
        assert text.endswith("<answer>") and ("<information>" in text) == (name == "rag")
        assert policy.tokenizer(text)["input_ids"] == prompt


def test_the_oracle_names_both_compared_values_where_it_answers_a_comparison() -> None:
    """Its demonstrations put the two values beside the decision, so a model imitating it need not look back."""
    from agents.evaluation.evaluate import evaluate
    from searchenv.tasks.registry import load_task

    examples = {ex.id: ex for ex in load_task("synthetic-comparison").examples("dev")[:10]}
    result = evaluate("oracle", task="synthetic-comparison", split="dev", n=10)
    answered = [ep for ep in result.episodes if ep.metrics["em"] == 1.0]
    assert len(answered) >= 8
    for ep in answered:
        first, second = examples[ep.example_id].decomposition
        last = [m["content"] for m in ep.messages if m["role"] == "assistant"][-1]
        decision = last.index("So the answer to the question is")
        assert f"is {second.answer}." in last[:decision] and f"was {first.answer}." in last[:decision], last


@pytest.mark.parametrize("task", ["synthetic-3hop", "synthetic-comparison"])
def test_the_planning_oracle_writes_the_chain_first_and_acts_as_the_oracle(task: str) -> None:
    """oracle-plan searches and answers as the oracle; its first turn lists the chain, each later turn its step."""
    import re

    from agents.evaluation.evaluate import evaluate
    from searchenv.tasks.registry import load_task

    examples = {ex.id: ex for ex in load_task(task).examples("dev")[:12]}
    plain = evaluate("oracle", task=task, split="dev", n=12)
    planned = evaluate("oracle-plan", task=task, split="dev", n=12)
    assert [e.answer for e in planned.episodes] == [e.answer for e in plain.episodes]

    def searches(ep: EpisodeResult) -> list[str]:
        return re.findall(r"<search> (.*?) </search>", " ".join(m["content"] for m in ep.messages))

    assert [searches(e) for e in planned.episodes] == [searches(e) for e in plain.episodes]
    right = [ep for ep in planned.episodes if ep.metrics["em"] == 1.0]
    assert len(right) >= 8
    for ep in right:
        hops = examples[ep.example_id].decomposition
        turns = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        n = len(hops)
        assert f"Plan ({n} steps" in turns[0] and "Step 1 of" in turns[0]
        for k in range(1, n):  # each later step names what the one before found
            assert turns[k].startswith(f"<think> #{k} is {hops[k - 1].answer}. Step {k + 1} of {n}: ")
        if task == "synthetic-3hop":  # each later sub-question refers to the answer before it as #k
            assert "2. " in turns[0] and "#1" in turns[0].split("2. ")[1]
            assert f"That was step {n} of {n}, so the answer is" in turns[-1]
        else:
            a, b = hops[0].answer, hops[1].answer
            why = "is earlier" if a.isdigit() else "they are the same" if a == b else "they are different"
            assert f"#1 is {a} and #2 is {b}; " in turns[-1] and why in turns[-1], turns[-1]
