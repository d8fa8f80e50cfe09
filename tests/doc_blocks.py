"""Shared by the engine launch checks: a docs section's bash commands, a free port, the docs' scratch task."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.tasks import write_qa_jsonl
from tests.conftest import DOCS, EXAMPLES

ROOT = Path(__file__).resolve().parents[1]


def bash_commands(page: str, section: str, comment: str = r"\s+#.*$") -> list[str]:
    """The commands of the ``bash`` block in ``docs/<page>``'s ``## <section>`` (continuations joined).

    Args:
        page: The page under docs/, e.g. ``engines/verl.md``.
        section: The section's title.
        comment: What a trailing comment looks like (it is cut).

    Raises:
        ValueError: If the section has no bash block.
    """
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", body, re.S)
    if block is None:
        raise ValueError(f"docs/{page}'s {section} section has no bash block")
    joined = block.group(1).replace("\\\n", " ")
    return [re.sub(comment, "", line).strip() for line in joined.splitlines() if line.strip()]


def python_blocks(page: str, heading: str) -> list[str]:
    """The ``python`` blocks of ``docs/<page>``'s section whose ``## `` heading starts with ``heading``.

    Raises:
        ValueError: If no section's heading starts so.
    """
    return code_blocks(page, heading, "python")


def code_blocks(page: str, heading: str, language: str) -> list[str]:
    """The ``language`` blocks of ``docs/<page>``'s section whose ``## `` heading starts with ``heading``.

    Raises:
        ValueError: If no section's heading starts so.
    """
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    if f"\n## {heading}" not in text:
        raise ValueError(f"docs/{page} has no section headed {heading!r}")
    body = text.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{re.escape(language)}\n(.*?)```", body, re.S)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scratch_task(work: Path) -> None:
    """The files the docs' commands read, for the test world: QA files under data/, a BM25 index under indexes/."""
    (work / "data").mkdir()
    write_qa_jsonl(work / "data" / "hotpot_train.jsonl", EXAMPLES)
    write_qa_jsonl(work / "data" / "hotpot_dev.jsonl", EXAMPLES)
    BM25Retriever.build(DOCS, work / "indexes" / "wiki18-bm25")


def wait_until_healthy(server: subprocess.Popen[bytes], url: str) -> None:
    """Wait up to a minute for ``searchenv serve`` at ``url`` to answer ``/health``.

    Raises:
        RuntimeError: If the server exits first (with its error output).
    """
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1):
                return
        except OSError:
            if server.poll() is not None:
                raise RuntimeError(server.stderr.read().decode() if server.stderr else "searchenv serve died") from None
            time.sleep(0.1)


@contextlib.contextmanager
def launch_block(commands: Sequence[str], work: Path, entry: str, bin_dir: Path) -> Iterator[tuple[int, list[str]]]:
    """Run a docs block's commands in ``work`` as bash would, with ``searchenv serve`` on a free port.

    The ``entry`` command (an engine's entry point) is not run: its arguments are expanded by
    bash and handed back, with the server's port. The server is stopped on exit.

    Args:
        commands: The block's commands (:func:`bash_commands`).
        work: The scratch folder (:func:`scratch_task`).
        entry: How the entry-point command starts, e.g. ``python -m verl.trainer.main_ppo``.
        bin_dir: Put first on ``PATH`` (the virtual environment's ``bin``).

    Raises:
        ValueError: If the block has no ``searchenv serve`` or no ``entry`` command.
    """
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PWD": str(work)}
    port, server, argv = free_port(), None, None
    try:
        for command in commands:
            if command.startswith("searchenv serve"):
                line = command.rstrip("&").strip().replace("--port 8000", f"--port {port}")
                server = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=work, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            elif command.startswith(entry):
                rest = command.removeprefix(entry)
                out = subprocess.run(["bash", "-c", f"printf '%s\\0' {rest}"], cwd=work, env=env,
                                     capture_output=True, check=True)
                argv = out.stdout.decode().split("\0")[:-1]  # the arguments as the shell hands them over
            else:
                subprocess.run(["bash", "-c", command], cwd=work, env=env, check=True, capture_output=True)
        if server is None or argv is None:
            raise ValueError(f"the block has no `searchenv serve` or no `{entry}` command")
        wait_until_healthy(server, f"http://127.0.0.1:{port}")
        yield port, argv
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
