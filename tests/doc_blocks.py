"""Shared by the engine launch checks: a docs section's bash commands, a free port, the docs' scratch task."""

from __future__ import annotations

import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.tasks.base import write_qa_jsonl
from tests.conftest import DOCS, EXAMPLES

ROOT = Path(__file__).resolve().parents[1]


def bash_commands(section: str, comment: str = r"\s+#.*$") -> list[str]:
    """The commands of the ``bash`` block in docs/engines.md's ``## <section>`` (continuations joined).

    Args:
        section: The section's title.
        comment: What a trailing comment looks like (it is cut).

    Raises:
        ValueError: If the section has no bash block.
    """
    text = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", body, re.S)
    if block is None:
        raise ValueError(f"docs/engines.md's {section} section has no bash block")
    joined = block.group(1).replace("\\\n", " ")
    return [re.sub(comment, "", line).strip() for line in joined.splitlines() if line.strip()]


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
