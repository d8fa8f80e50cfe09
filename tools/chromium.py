"""Find Debian's Chromium for the browser tests, and install it where it is missing and apt-get can (``make``).

Usage: ``python tools/chromium.py``. The browser tests (``tests/test_report.py``) drive this Chromium through
Playwright's ``executable_path``: no browser is ever downloaded (``playwright install`` is never run). Where
Chromium is missing, it is installed with ``apt-get install chromium`` when apt-get can run here (as root, or
through ``sudo -n``); where it cannot, or the install fails, one line says so and the browser tests skip with
the reason. The exit status is 0 either way: a missing browser never stops the set-up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

#: Names of Debian's (and Ubuntu's) Chromium on ``PATH``; ``SEARCHENV_CHROMIUM`` names another executable.
NAMES = ("chromium", "chromium-browser")
SKIPS = "the browser tests of tests/test_report.py will skip"


def find_chromium(env: Mapping[str, str] | None = None) -> str | None:
    """The Chromium executable the browser tests drive: ``SEARCHENV_CHROMIUM``, else the first of :data:`NAMES`."""
    env = os.environ if env is None else env
    given = env.get("SEARCHENV_CHROMIUM")
    if given:
        return given if Path(given).is_file() else None
    for name in NAMES:
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return found
    return None


def apt_prefix(env: Mapping[str, str]) -> list[str] | None:
    """How apt-get can run here: ``[]`` as root, ``["sudo", "-n"]`` with sudo that asks no password, else None."""
    if shutil.which("apt-get", path=env.get("PATH")) is None:
        return None
    if os.geteuid() == 0:
        return []
    sudo = shutil.which("sudo", path=env.get("PATH"))
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True, env=dict(env), timeout=30).returncode == 0:
        return [sudo, "-n"]
    return None


def main() -> int:
    """Say where Chromium is, installing it first where it is missing and apt-get can run; always 0."""
    env = dict(os.environ)
    found = find_chromium(env)
    if found:
        print(f"chromium: {found}")
        return 0
    prefix = apt_prefix(env)
    if prefix is None:
        print(f"note: no Chromium here, and apt-get cannot install it (not root, no sudo without a password, or no "
              f"apt-get): {SKIPS} (apt-get install chromium, or set SEARCHENV_CHROMIUM)")
        return 0
    apt = {**env, "DEBIAN_FRONTEND": "noninteractive"}
    print("chromium: installing Debian's package for the browser tests (apt-get install chromium)")
    for args in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                                                  "chromium"]):
        done = subprocess.run([*prefix, *args], env=apt, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            print(f"note: {' '.join(args[:2])} exited with {done.returncode} ({last}): {SKIPS}")
            return 0
    found = find_chromium(env)
    print(f"chromium: {found}" if found else f"note: apt-get installed no chromium on PATH: {SKIPS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
