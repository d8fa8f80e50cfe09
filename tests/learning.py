"""Learning tests: what each guarantees, and the margin it held by in this run.

A test marked ``learning`` asserts that training changed a model's behaviour. Such a test must not
depend on how this CPU rounds: kernels differ between machines (AVX2, AVX-512, AMX, thread counts),
so a run that is deterministic on one machine takes another path on the next. Each learning test
therefore asserts what the algorithm guarantees, through :func:`margin`, which records the measured
value, the bound and the guarantee; the session prints them (``learning margins``), and ``make
test-numerics`` runs every learning test again under a second arithmetic of the same CPU
(:data:`ARITHMETICS`) and writes each margin under each to ``SEARCHENV_MARGINS_FILE``.

The learning tests and what each guarantees:

- ``test_trl.py::test_grpo_trainer_learns_a_toy_reward_with_searchenv_owning_it``: TRL's GRPOTrainer,
  fed by searchenv's rollouts, raises the expected count of the rewarded letter in the first token
  (exact, on the model's next-token distribution over the task's prompts, before and after).
- ``test_trainers.py::test_grpo_raises_a_toy_reward``: searchenv's GRPO raises the expected reward of a
  dense toy signal (letters 'e' in the answer), estimated on 256 samples before and after, by far more
  than the estimate's error.
- ``test_trainers.py::test_sft_lowers_demonstration_loss``: SFT lowers the demonstration loss measured
  on the same batch before and after.
- ``test_arena_browse.py::test_oracle_demonstrations_train_under_sft``: the same for the ARENA and
  browse protocols' demonstrations.
- ``test_mappo.py::test_the_shared_return_reaches_every_roles_advantage``: one MAPPO step with every
  advantage positive raises each role's log-likelihood of its own tokens.
- ``test_mappo.py::test_warm_start_learns_each_roles_oracle_output``: the MMOA warm start lowers the
  role demonstrations' loss.
- ``test_trl_tool_docs.py::test_the_tool_run_trains_through_trl_from_the_packaged_model``: TRL's SFT on
  tool-call demonstrations lowers its loss, and the first GRPO step then earns SearchQA's reward.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The arithmetics ``make test-numerics`` runs the learning tests under: environment variables read
#: by torch, MKL and oneDNN when they load. ``native`` is what the machine picks; ``portable`` takes
#: torch's scalar kernels (no AVX2/AVX-512), MKL's conditional-reproducibility path, oneDNN without
#: AVX2/AVX-512/AMX, one thread, and float32 matmuls allowed to use bfloat16 where the CPU has it.
ARITHMETICS: dict[str, dict[str, str]] = {
    "native": {},
    "portable": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "OMP_NUM_THREADS": "1",
        "SEARCHENV_MATMUL_PRECISION": "medium",
    },
}


@dataclass(frozen=True)
class Margin:
    """One learning assertion: ``value`` must exceed ``bound``.

    Attributes:
        test: The test's node id.
        what: What was measured, in words.
        value: The measured value.
        bound: What it had to exceed.
        arithmetic: ``SEARCHENV_ARITHMETIC`` of this run (``native`` unless make test-numerics set it).
    """

    test: str
    what: str
    value: float
    bound: float
    arithmetic: str

    @property
    def held(self) -> bool:
        """The assertion held."""
        return self.value > self.bound


RECORDED: list[Margin] = []


def current_test() -> str:
    """The running test's node id (pytest sets ``PYTEST_CURRENT_TEST``)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]


def margin(what: str, value: float, bound: float) -> None:
    """Assert ``value > bound`` and record both (printed at the end of the session, and written to
    ``SEARCHENV_MARGINS_FILE`` when set).

    Raises:
        AssertionError: If ``value <= bound``.
    """
    m = Margin(current_test(), what, float(value), float(bound), os.environ.get("SEARCHENV_ARITHMETIC", "native"))
    RECORDED.append(m)
    path = os.environ.get("SEARCHENV_MARGINS_FILE")
    if path:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(m)) + "\n")
    assert m.held, f"{what}: {value:.4g} does not exceed {bound:.4g}"


def letter_mass(model: Any, tokenizer: Any, contexts: list[list[int]], letter: str) -> float:
    """Expected count of ``letter`` in the model's next token after each context, averaged (exact, no sampling).

    The toy rewards of the learning tests pay for a letter; this is the probability of the rewarded
    behaviour measured directly, so a rise in it does not wait on which samples a CPU happened to draw.
    """
    import torch

    counts = torch.tensor([tokenizer.decode([i]).count(letter) for i in range(len(tokenizer))], dtype=torch.float32)
    device = next(model.parameters()).device
    total = 0.0
    with torch.no_grad():
        for ids in contexts:
            logits = model(torch.tensor([ids], device=device)).logits[0, -1].float().cpu()
            total += float(torch.softmax(logits, -1)[: len(counts)] @ counts)
    return total / len(contexts)


def demo_loss(policy: Any, samples: list[Any]) -> float:
    """Mean negative log-likelihood per trained token of ``samples`` under ``policy`` (what SFT lowers).

    Measured on the same samples before and after training, so the drop is the training's, not a
    difference between the batches that happened to be drawn at the first and the last step.
    """
    from agents.trainers.models import pad_token_id
    from agents.trainers.samples import mean_nll

    return mean_nll(policy.model, samples, pad_token_id(policy))
