"""An episode log changes nothing that is not its own file: no link is followed, no foreign file is cut."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.baselines import EpisodeResult
from agents.evaluation.episode_log import EpisodeLog

SETTINGS = {"agent": "rag", "top_k": 3}
RECORD = EpisodeResult("q0", "Where?", ["Brno"], "Brno", [{"role": "user", "content": "Where?"}], [], {"em": 1.0})


def test_a_link_at_its_path_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me\nand my last line")
    path = tmp_path / "out" / "log.jsonl"
    path.parent.mkdir()
    path.symlink_to(victim)
    log = EpisodeLog(path, SETTINGS)
    with pytest.raises(ValueError, match="is a symbolic link"):
        log.load()
    with pytest.raises(ValueError, match="is a symbolic link"):
        log.append([(0, RECORD)])
    assert victim.read_bytes() == b"keep me\nand my last line"
    dangling = tmp_path / "out" / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "not-yet")
    with pytest.raises(ValueError, match="is a symbolic link"):
        EpisodeLog(dangling, SETTINGS).append([(0, RECORD)])
    assert not (tmp_path / "not-yet").exists()


@pytest.mark.parametrize("content", [b"keep me\nand my last line", b"one line without a newline",
                                     b'{"searchenv_episodes": 1, "settings": {"agent": "rag", "top_k": 3}}'])
def test_a_file_that_is_not_a_log_is_refused_before_anything_is_cut(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"line 1: (expected the settings line|invalid JSON)"):
        EpisodeLog(path, SETTINGS).load()
    assert path.read_bytes() == content


def test_a_log_of_other_settings_keeps_its_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    EpisodeLog(path, {"agent": "other"}).append([(0, RECORD)])
    with path.open("ab") as f:
        f.write(b'{"position": 1, "epi')
    before = path.read_bytes()
    with pytest.raises(ValueError, match="other settings"):
        EpisodeLog(path, SETTINGS).load()
    assert path.read_bytes() == before


def test_its_own_torn_last_line_is_still_dropped(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = EpisodeLog(path, SETTINGS)
    log.append([(0, RECORD)])
    whole = path.read_bytes()
    with path.open("ab") as f:
        f.write(b'{"position": 1, "epi')
    assert log.load() == {0: RECORD} and path.read_bytes() == whole
    log.append([(1, RECORD)])
    assert sorted(log.load()) == [0, 1]


def test_a_folder_at_its_path_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    os.mkdir(path)
    with pytest.raises((ValueError, IsADirectoryError)):
        EpisodeLog(path, SETTINGS).load()
