"""`searchenv mcp`: an MCP client lists the tools and gets from `search` exactly `searchenv search --json`'s hits.

The real SDK client talks to the real command: over stdio (the client spawns it) and over
streamable HTTP (a free port); hostile arguments are answered with tool errors, and a bad client
leaves the others untouched.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app
from searchenv.retrievers.bm25 import BM25Retriever
from tests.conftest import DOCS
from tests.doc_blocks import free_port

mcp = pytest.importorskip("mcp")
httpx2 = pytest.importorskip("httpx2")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from searchenv.serving.mcp_server import DocumentLookup, create_server  # noqa: E402
from searchenv.serving.server import ServerLimits  # noqa: E402

CLI = [sys.executable, "-c", "from searchenv.cli import main; main()"]
QUERIES = [("Karsk", 3), ("Velora Quenn painter", 2), ("country capital Essaly", 5), ("null", 3),
           ("Quenn", 1), ("nothing matches zzz", 4), ("born in", 8),
           ("Montabri café — ☃", 2)]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mcp") / "idx"
    BM25Retriever.build(DOCS, folder)
    return folder


def cli_json(index: Path, query: str, k: int) -> list[dict[str, Any]]:
    """What `searchenv search --json` prints for one query (its one list of hits)."""
    out = CliRunner().invoke(get_app(), ["search", query, "--index", str(index), "--k", str(k), "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert len(rows) == 1
    return list(rows[0])


def run(check: Callable[[Client], Awaitable[None]], server: Any) -> None:
    async def main() -> None:
        async with Client(server) as client:
            await check(client)

    asyncio.run(main())


async def check_tools_and_hits(client: Client, index: Path) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"search", "open"}
    assert set(tools["search"].input_schema["properties"]) == {"query", "k"}
    assert tools["search"].input_schema["required"] == ["query"]
    for query, k in QUERIES:
        result = await client.call_tool("search", {"query": query, "k": k})
        assert not result.is_error, result.content
        assert result.structured_content == {"hits": cli_json(index, query, k)}
    default = await client.call_tool("search", {"query": "Karsk"})
    assert default.structured_content == {"hits": cli_json(index, "Karsk", 3)}


def stdio_params(index: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(command=CLI[0], args=[*CLI[1:], "mcp", "--index", str(index), *extra],
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.slow
def test_stdio_client_lists_tools_and_search_gives_cli_json_hits(index: Path) -> None:
    async def check(client: Client) -> None:
        await check_tools_and_hits(client, index)
        bad = await client.call_tool("search", {"query": "Karsk", "k": "3"})  # a tool error, not a dead server
        assert bad.is_error and "valid integer" in bad.content[0].text
        unknown = await client.call_tool("search", {"query": "Karsk", "topk": 1})
        assert unknown.is_error and "unknown argument(s) 'topk'" in unknown.content[0].text
        opened = await client.call_tool("open", {"id": "d4"})
        assert opened.structured_content == {"id": "d4", "title": DOCS[4].title, "text": DOCS[4].text}
        again = await client.call_tool("search", {"query": "Karsk", "k": 1})
        assert again.structured_content == {"hits": cli_json(index, "Karsk", 1)}

    run(check, stdio_params(index))


def wait_for_mcp(proc: subprocess.Popen[bytes], url: str, log: Path | None = None) -> None:
    """Wait up to a minute for ``searchenv mcp --transport http`` at ``url`` to take connections."""
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/mcp", timeout=1.0, trust_env=False)
            return
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"server did not start: {log.read_text() if log is not None else ''}")
            time.sleep(0.2)


@pytest.fixture()
def http_server(index: Path, tmp_path: Path) -> Iterator[str]:
    """`searchenv mcp --transport http` on a free port, token from SEARCHENV_TOKEN; yields its base URL."""
    port = free_port()
    log = (tmp_path / "server.log").open("wb")
    env = {**os.environ, "SEARCHENV_TOKEN": "tok-of-16-characters", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*CLI, "mcp", "--index", str(index), "--transport", "http", "--port", str(port),
                             "--max-body-bytes", "65536"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_mcp(proc, url, tmp_path / "server.log")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def http_transport(url: str, token: str = "tok-of-16-characters") -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    return streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, trust_env=False))


def post(url: str, body: bytes, **headers: str) -> httpx.Response:
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "Authorization": "Bearer tok-of-16-characters", "MCP-Protocol-Version": "2025-06-18"}
    return httpx.post(f"{url}/mcp", content=body, headers={**base, **headers}, timeout=10, trust_env=False)


@pytest.mark.slow
def test_http_client_lists_tools_and_search_gives_cli_json_hits(index: Path, http_server: str) -> None:
    async def check(client: Client) -> None:
        await check_tools_and_hits(client, index)

    run(check, http_transport(http_server))
    # bound to loopback only
    port = int(http_server.rpartition(":")[2])
    listening = Path("/proc/net/tcp").read_text() if Path("/proc/net/tcp").exists() else ""
    if listening:
        local = [line.split()[1] for line in listening.splitlines()[1:] if line.split()[3] == "0A"]
        assert f"0100007F:{port:04X}" in local and f"00000000:{port:04X}" not in local


@pytest.mark.slow
def test_http_refuses_bad_token_host_and_oversized_bodies_and_keeps_serving(index: Path, http_server: str) -> None:
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "search", "arguments": {"query": "Karsk", "k": 1}}}).encode()
    assert post(http_server, call, Authorization="Bearer wrong").status_code == 401
    assert post(http_server, call, Authorization="").status_code == 401
    assert post(http_server, call, Host="rebound.example.com").status_code == 400
    huge = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "search", "arguments": {"query": "x" * 100_000}}}).encode()
    assert post(http_server, huge).status_code == 413
    assert post(http_server, b"{not json").status_code in (400, 422)
    deep = b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search","arguments":{"query":' + \
        b"[" * 30_000 + b"]" * 30_000 + b"}}}"
    assert post(http_server, deep).status_code == 400  # a JSON-RPC parse error, not a crashed worker
    not_an_object = post(http_server, json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                                  "params": {"name": "search", "arguments": ["Karsk"]}}).encode())
    assert not_an_object.status_code == 200 and not_an_object.json()["result"]["isError"] is True
    assert "arguments must be an object" in not_an_object.json()["result"]["content"][0]["text"]
    assert post(http_server, call, **{"Content-Type": "text/plain"}).status_code in (400, 415)
    # stateless: no stream to hold open with GET (it would hang on a connection nothing is sent on)
    assert httpx.get(f"{http_server}/mcp", timeout=5, trust_env=False,
                     headers={"Authorization": "Bearer tok-of-16-characters", "Accept": "text/event-stream"},
                     ).status_code == 405

    async def check(client: Client) -> None:  # a client within the limits is still answered
        too_long = await client.call_tool("search", {"query": "x" * 3000})
        assert too_long.is_error and "at most 2048 characters" in too_long.content[0].text
        result = await client.call_tool("search", {"query": "Karsk", "k": 2})
        assert result.structured_content == {"hits": cli_json(index, "Karsk", 2)}

    run(check, http_transport(http_server))

    async def wrong_token(client: Client) -> None:
        await client.list_tools()

    with pytest.raises(Exception) as refused:  # noqa: B017 - the SDK raises its error inside task groups
        run(wrong_token, http_transport(http_server, token="nope"))
    assert "MCPError" in repr(refused.value)  # the server's 401, raised alone or inside the SDK's task groups


# ----------------------------------------------------------------- hostile arguments, in process


@pytest.fixture(scope="module")
def server(index: Path) -> Any:
    return create_server(BM25Retriever.load(index), documents=DocumentLookup([index]),
                         limits=ServerLimits(max_topk=10, max_query_chars=64))


HOSTILE: list[tuple[str, Any, str]] = [
    ("search", {}, "query"),
    ("search", {"query": None}, "query"),
    ("search", {"query": 5}, "valid string"),
    ("search", {"query": ["Karsk"]}, "valid string"),
    ("search", {"query": "x" * 65}, "at most 64 characters"),
    ("search", {"query": "Karsk", "k": "3"}, "valid integer"),
    ("search", {"query": "Karsk", "k": 3.0}, "valid integer"),
    ("search", {"query": "Karsk", "k": True}, "valid integer"),
    ("search", {"query": "Karsk", "k": 0}, "greater than or equal to 1"),
    ("search", {"query": "Karsk", "k": -5}, "greater than or equal to 1"),
    ("search", {"query": "Karsk", "k": 11}, "less than or equal to 10"),
    ("search", {"query": "Karsk", "k": 10**400}, "less than or equal to 10"),
    ("search", {"query": "Karsk", "topk": 3}, "unknown argument(s) 'topk'"),
    ("search", {"query": "Karsk", "k": {"$gt": 1}}, "valid integer"),
    ("open", {"id": "no-such-doc"}, "no document with id 'no-such-doc'"),
    ("open", {"id": 4}, "valid string"),
    ("open", {"doc_id": "d4"}, "unknown argument(s) 'doc_id'"),
    ("open", {"id": "d" * 65}, "at most 64 characters"),
]


@pytest.mark.parametrize(("tool", "arguments", "message"), HOSTILE)
def test_hostile_arguments_get_a_tool_error_and_the_server_keeps_answering(
        server: Any, index: Path, tool: str, arguments: Any, message: str) -> None:
    async def check(client: Client) -> None:
        bad = await client.call_tool(tool, arguments)
        assert bad.is_error and bad.structured_content is None
        assert message in bad.content[0].text, bad.content[0].text
        good = await client.call_tool("search", {"query": "Karsk", "k": 2})
        assert not good.is_error and good.structured_content == {"hits": cli_json(index, "Karsk", 2)}

    run(check, server)


def test_open_returns_each_document_as_indexed_and_search_is_stateless(server: Any, index: Path) -> None:
    async def check(client: Client) -> None:
        for d in DOCS:
            got = await client.call_tool("open", {"id": d.id})
            assert got.structured_content == {"id": d.id, "title": d.title, "text": d.text}
        first = await client.call_tool("search", {"query": "Quenn", "k": 4})
        await client.call_tool("search", {"query": "Karsk", "k": 1})
        assert (await client.call_tool("search", {"query": "Quenn", "k": 4})).structured_content == \
            first.structured_content

    run(check, server)


def test_create_server_refuses_a_default_k_over_the_limit(index: Path) -> None:
    with pytest.raises(ValueError, match="exceeds max_topk"):
        create_server(BM25Retriever.load(index), limits=ServerLimits(max_topk=5), default_k=6)


def test_stdio_refuses_http_only_options(index: Path) -> None:
    out = CliRunner().invoke(get_app(), ["mcp", "--index", str(index), "--allowed-host", "x.example"])
    assert out.exit_code == 2 and "applies to --transport http" in out.output


def test_the_cli_does_not_import_the_sdk_until_mcp_runs() -> None:
    code = ("import sys\nsys.argv = ['searchenv', '--help']\nfrom searchenv.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('MCP' if 'mcp' in sys.modules else 'NO-MCP')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "mcp" in out.stdout and out.stdout.strip().splitlines()[-1] == "NO-MCP"


def test_a_model_that_copies_what_the_tools_return_scores_nothing(server: Any, corpus_file: Path) -> None:
    """The server holds no answers: what its tools return never shows one, so the copier's answer scores EM 0."""
    from searchenv.env import SearchQAEnv

    from .leak import SEALED, assert_no_gold, copied_answer

    async def check(client: Client) -> None:
        env = SearchQAEnv(SEALED, corpus=corpus_file)
        for example in SEALED:
            seen: list[Any] = []
            for query in (example.question, "zzz"):
                found = await client.call_tool("search", {"query": query, "k": 5})
                seen += [found.structured_content, found.content[0].text]
                for hit in (found.structured_content or {}).get("hits", [])[:2]:
                    opened = await client.call_tool("open", {"id": hit["id"]})
                    seen += [opened.structured_content, opened.content[0].text]
            assert_no_gold(seen, example.answers, f"mcp/{example.id}")
            env.reset(options={"example_id": example.id})
            *_, info = env.step(f"<answer> {copied_answer(seen)} </answer>")
            assert info["em"] == 0.0

    run(check, server)


HOSTILE_LINES: list[tuple[str, Any, str]] = [
    ('{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": ["search"], "arguments": {}}}', 11,
     "the tool name must be a string"),
    ('{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": {"a": 1}}}', 12,
     "the tool name must be a string"),
    ('{"jsonrpc": "2.0", "id": 13, "method": "tools/list", "params": ["x"]}', 13, "params must be an object"),
    ('{"jsonrpc": "2.0", "id": "s\\ud800", "method": "tools/call", "params": {"name": "search", '
     '"arguments": {"query": "Kar\\udc00sk"}}}', "s\\ud800", "lone surrogate"),
    ('{"jsonrpc": "2.0", "id": 15, "method": "tools/call", "params": {"name": "search", "arguments": {"query": '
     '"Kar\\ud800sk"}}}', 15, "lone surrogate"),
    ("this is not JSON", None, "Parse error"),
]


def test_stdio_answers_every_request_it_cannot_read_and_keeps_serving(index: Path) -> None:
    """Raw lines on the server's stdin: each hostile request gets an error with its id, then a search still works."""
    import queue
    import threading

    proc = subprocess.Popen([*CLI, "mcp", "--index", str(index)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or []], daemon=True).start()

    def send(line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()

    def answer() -> dict[str, Any]:
        return dict(json.loads(lines.get(timeout=30)))

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        assert answer()["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        for line, request_id, message in HOSTILE_LINES:
            send(line)
            got = answer()
            assert got["id"] == request_id, (line, got)
            text = got["error"]["message"] if "error" in got else got["result"]["content"][0]["text"]
            assert message in text, (line, got)
            assert "error" in got or got["result"]["isError"] is True
        send(json.dumps({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                         "params": {"name": "search", "arguments": {"query": "Karsk", "k": 1}}}))
        good = answer()
        assert good["id"] == 99 and good["result"]["structuredContent"] == {"hits": cli_json(index, "Karsk", 1)}
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_http_answers_a_tool_name_that_is_not_text_with_a_tool_error(http_server: str) -> None:
    for name in (["search"], {"a": 1}, 5):
        body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name}}).encode()
        got = post(http_server, body)
        assert got.status_code == 200, got.text
        result = got.json()["result"]
        assert result["isError"] is True and "the tool name must be a string" in result["content"][0]["text"]


@pytest.mark.slow
def test_the_docs_launch_and_sdk_snippet_run_as_written(tmp_path: Path) -> None:
    """docs/serving/mcp.md: build the index, serve it over HTTP with the token, run the SDK snippet (port changed)."""
    import re
    import shlex

    from tests.doc_blocks import ROOT

    text = (ROOT / "docs" / "serving" / "mcp.md").read_text()
    launch = re.search(r"### Launch\n\n```bash\n(.*?)```", text, re.S)
    snippet = re.search(r"With the MCP Python SDK.*?```python\n(.*?)```", text, re.S)
    assert launch is not None and snippet is not None
    build, stdio, http = [re.sub(r"\s+#.*$", "", line) for line in launch.group(1).strip().splitlines()]
    assert stdio == "searchenv mcp --index idx-bm25"
    bin_dir = Path(sys.executable).parent
    done = subprocess.run([str(bin_dir / "searchenv"), *shlex.split(build)[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    port = free_port()
    token, command = http.split(" ", 1)
    env = {**os.environ, token.split("=")[0]: token.split("=")[1], "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    server = subprocess.Popen([str(bin_dir / "searchenv"), *shlex.split(command)[1:], "--port", str(port)],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_mcp(server, f"http://127.0.0.1:{port}")
        code = snippet.group(1).replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines() == ["['search', 'open']", "country0", "Eriennor"], ran.stdout
