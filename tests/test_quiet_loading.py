"""Loading and wrapping a model prints none of the libraries' own noise (a newcomer reads it as trouble)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("transformers")


def test_loading_a_model_folder_shows_no_progress_bar(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from transformers.utils import logging as hf_logging

    from agents.policies.hf import HFPolicy
    from tests.tiny_model import tiny_model_folder

    tiny_model_folder(tmp_path / "tiny")
    capfd.readouterr()
    hf_logging.enable_progress_bar()
    HFPolicy.from_pretrained(tmp_path / "tiny", device="cpu")
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "%|" not in err, err
    assert hf_logging.is_progress_bar_enabled()  # restored for the user's own loads


def test_lora_training_shows_no_deprecation_warning_from_peft() -> None:
    """peft reads transformers' deprecated ``is_gradient_checkpointing``; that warning is not the user's to act on."""
    pytest.importorskip("peft")
    from agents.trainers.config import TrainConfig
    from agents.trainers.models import prepare_model
    from tests.tiny_model import tiny_policy

    policy = tiny_policy(seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepare_model(policy, TrainConfig(output_dir="unused", lora=True))
    assert hasattr(policy.model, "peft_config")
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)], [str(w.message) for w in caught]
    with warnings.catch_warnings(record=True) as later:  # the filter does not outlive the wrap
        warnings.simplefilter("always")
        warnings.warn("`is_gradient_checkpointing` is deprecated", FutureWarning, stacklevel=1)
    assert len(later) == 1
