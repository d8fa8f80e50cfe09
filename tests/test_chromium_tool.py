"""tools/chromium.py: the set-up finds Debian's Chromium, installs it with apt-get where it can, else says why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "chromium.py"


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _run(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SEARCHENV_CHROMIUM"}
    return subprocess.run([sys.executable, str(TOOL)], env={**env, "PATH": str(bin_dir)}, capture_output=True,
                          text=True, timeout=60)


def test_a_missing_chromium_is_installed_with_apt_get(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    # apt-get (as root) or sudo -n apt-get (otherwise): each call logged; install puts chromium on PATH
    _script(bin_dir / "apt-get", f'echo "$DEBIAN_FRONTEND $*" >> {log}\n'
            f'case "$1" in install) printf "#!/bin/sh\\n" > {bin_dir}/chromium; '
            f'/bin/chmod +x {bin_dir}/chromium;; esac\n')
    _script(bin_dir / "sudo", 'shift; [ "$1" = true ] && exit 0; exec "$@"\n')
    done = _run(bin_dir)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["noninteractive update -qq",
                                            "noninteractive install -y -qq --no-install-recommends chromium"]
    assert done.stdout.splitlines()[-1] == f"chromium: {bin_dir / 'chromium'}"
    again = _run(bin_dir)  # present now: nothing installed
    assert again.stdout == f"chromium: {bin_dir / 'chromium'}\n" and len(log.read_text().splitlines()) == 2


def test_without_apt_get_or_when_it_fails_the_set_up_goes_on_and_says_the_browser_tests_skip(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    done = _run(bin_dir)
    assert done.returncode == 0 and "apt-get cannot install it" in done.stdout and "will skip" in done.stdout
    _script(bin_dir / "apt-get", 'echo "E: Could not open lock file" >&2; exit 100\n')
    _script(bin_dir / "sudo", 'shift; [ "$1" = true ] && exit 0; exec "$@"\n')
    failed = _run(bin_dir)
    assert failed.returncode == 0, failed.stderr
    assert "apt-get update exited with 100 (E: Could not open lock file)" in failed.stdout
    assert "will skip" in failed.stdout
