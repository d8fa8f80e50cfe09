"""TRL's colocated vLLM path with two tensor-parallel ranks, through TRL's own generation entry point.

Two processes (gloo) share one "engine" as vLLM tensor parallelism does: TRL's real
``VLLMGeneration.generate`` gathers the prompts of both ranks, generates them in one call on every
rank, and hands each rank its share; with sleep mode it wakes the engine's cache first and puts it
back to sleep after. The one stand-in is the engine itself (vLLM needs a GPU): a tiny real model
generating with the sampling parameters TRL builds, which records every batch and any call made
while it sleeps. The ranks run episodes of different lengths (one turn against three), so a rank
that is done must keep taking part in the other's rounds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("trl")

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


class _Params:
    """Stands in for ``vllm.SamplingParams``: keeps the keyword arguments TRL builds."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


class _Engine:
    """Stands in for a colocated ``vllm.LLM``: a tiny real model; records batches and sleep state."""

    def __init__(self, tokenizer: Any) -> None:
        from tests.tiny_model import tiny_policy

        self.policy = tiny_policy(seed=0)
        self.tokenizer = tokenizer
        self.asleep: set[str] = set()
        self.batches: list[list[list[int]]] = []
        self.params: list[dict[str, Any]] = []
        self.while_asleep = 0

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    def sleep(self, level: int = 1) -> None:
        self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.asleep -= set(tags or ["weights", "kv_cache"])

    def generate(self, prompts: list[dict[str, Any]], sampling_params: Any = None, use_tqdm: bool = False) -> list[Any]:
        if self.asleep:
            self.while_asleep += 1
        ids = [list(p["prompt_token_ids"]) for p in prompts]
        self.batches.append(ids)
        sp = sampling_params
        self.params.append({k: v for k, v in vars(sp).items() if isinstance(v, int | float | str | list | type(None))})
        # the same prompt gives the same sample on every rank (one engine across the group)
        seeds = [hash(tuple(p)) & 0x7FFFFFFF for p in ids]
        gens = self.policy.generate(ids, stop=tuple(sp.stop or ()), max_new_tokens=sp.max_tokens,
                                    temperature=sp.temperature, top_p=sp.top_p, seed=seeds)
        out = []
        for p, g in zip(ids, gens, strict=True):
            lps = [{t: SimpleNamespace(logprob=lp, rank=1)} for t, lp in zip(g.token_ids, g.logprobs, strict=True)]
            out.append(SimpleNamespace(prompt_token_ids=p, outputs=[SimpleNamespace(token_ids=list(g.token_ids),
                                                                                     logprobs=lps)]))
        return out


def _rank(rank: int, folder: str) -> None:
    import torch.distributed as dist
    import trl.generation.vllm_generation as vg
    from trl.generation.vllm_generation import VLLMGeneration

    from agents.integrations.trl import SearchQARollout
    from searchenv.retrievers.bm25 import BM25Retriever
    from tests.conftest import DOCS, EXAMPLES
    from tests.tiny_model import build_tiny_model

    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=2)
    vg.SamplingParams = _Params  # vLLM is not installed here: TRL builds its parameters into the stand-in
    _, tokenizer = build_tiny_model(seed=0)
    engine = _Engine(tokenizer)
    gen = VLLMGeneration.__new__(VLLMGeneration)
    synced: list[int] = []

    def sync_weights() -> None:  # TRL re-pushes the trained weights that sleep level 2 discarded
        engine.wake_up(["weights"])
        gen._llm_weights_sleeping = False
        synced.append(1)

    gen.__dict__.update(
        mode="colocate", tensor_parallel_size=2, tp_group=dist.new_group([0, 1]), enable_sleep_mode=True,
        _llm_weights_sleeping=True, llm=engine, model=torch_module(), accelerator=SimpleNamespace(),
        temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0, max_completion_length=512,
        logprobs=0, generation_kwargs={}, structured_outputs_regex=None, sync_weights=sync_weights,
    )
    engine.sleep(2)
    trainer = SimpleNamespace(
        use_vllm=True, vllm_mode="colocate", vllm_generation=gen, processing_class=tokenizer,
        accelerator=SimpleNamespace(process_index=rank, num_processes=2), state=SimpleNamespace(global_step=0),
        temperature=1.0, top_p=1.0, eos_token_ids=[tokenizer.eos_token_id], max_completion_length=None,
    )
    retriever = BM25Retriever.build(DOCS, Path(folder) / f"idx{rank}")
    rollout = SearchQARollout(list(EXAMPLES), retriever=retriever, max_turns=1 if rank == 0 else 3,
                              max_new_tokens=12)
    question = EXAMPLES[rank].question
    out = rollout([question, question], trainer)
    result = {
        "out": {k: out[k] for k in ("prompt_ids", "completion_ids", "env_mask")},
        "turns": [m["turns"] for m in out["searchenv_metrics"]],
        "batches": engine.batches, "params": engine.params, "while_asleep": engine.while_asleep,
        "asleep_after": sorted(engine.asleep), "synced": len(synced),
        "settings_after": [gen.temperature, gen.max_completion_length, gen.generation_kwargs],
    }
    Path(folder, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def torch_module() -> Any:
    import torch

    return torch.nn.Linear(1, 1)  # not a PEFT model: TRL adds no barrier


@pytest.mark.slow
def test_two_tensor_parallel_ranks_share_every_batch_through_trls_generation(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(str(tmp_path),), nprocs=2, join=True)
    r0, r1 = (json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1))
    # one engine across the group: both ranks' engines generated the same batches, in the same order,
    # and rank 0 (one turn) kept taking part in rank 1's three rounds
    assert r0["batches"] == r1["batches"] and len(r0["batches"]) == 3
    assert r0["turns"] == [1, 1] and r1["turns"] == [3, 3]
    # never generated into a sleeping engine; asleep again afterwards; weights re-synced after sleep
    assert r0["while_asleep"] == r1["while_asleep"] == 0
    assert r0["asleep_after"] == r1["asleep_after"] == ["kv_cache", "weights"] and r0["synced"] >= 1
    # the turn's own settings reached the engine (stop strings kept), and TRL's were restored after
    first = r1["params"][0]
    assert first["max_tokens"] == 12 and first["stop"] == ["</search>", "</answer>"]
    assert first["include_stop_str_in_output"] is True and first["n"] == 1
    assert r1["settings_after"] == [1.0, 512, {}]
    # each rank received its own episodes, token-exact: its prompts are in the first gathered batch
    for rank, r in enumerate((r0, r1)):
        share = r0["batches"][0][2 * rank: 2 * rank + 2]
        assert r["out"]["prompt_ids"] == share
        for ids, mask in zip(r["out"]["completion_ids"], r["out"]["env_mask"], strict=True):
            assert len(ids) == len(mask) and sum(mask) > 0
