"""Throughput and latency of ``tfm serve`` under concurrent clients, beside an unbatched server
and offline ``tfm translate`` of the same file; then an overload run.

    python bench/serve.py --model MODEL [--src ../shared/data/multi30k/test_2016_flickr.en.gz]
        [--out runs/serve.json] [--clients 1,8,32,128] [--workers 1,2] [--beam N] [--limit N]
        [--precision fp32]

Measures, on this machine and in this run:
  - offline: the file translated as ``tfm translate --input`` translates it (the same library
    call with the same default ``--workers``, model load excluded), and the whole
    ``tfm translate`` command (start-up and load included);
  - ``tfm serve`` (dynamic batching, default settings) with each ``--workers`` count asked for,
    and an unbatched ``tfm serve`` (``--max-batch-tokens 1``: one sentence per batch, one
    worker), each driven by 1, 8, 32 and 128
    concurrent clients (closed loop: each sends its next sentence when answered), one sentence
    per request, the whole file at each level: sentences/s, p50/p95/p99 latency, mean batch
    size (from the server's /metrics) and how many translations equal the offline ones;
  - overload: many clients against a small queue (``--max-queue``), with the most workers;
    refused requests (503) are retried after their Retry-After (capped at 1 s): counts of
    200s, 503s and anything else (other statuses, connection errors, timeouts), sentences
    never translated, and whether /health still answers afterwards.
Prints a Markdown table and writes everything to --out. The clients are a minimal HTTP/1.1
client on keep-alive connections, in this process, on the same machine: run it on an
otherwise idle machine (with two cores, any other process changes every figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter, deque
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tfm.allocator import keep_freed_memory  # noqa: E402
from tfm.data.corpus import read_text_lines  # noqa: E402

DEFAULT_SRC = REPO.parent / "shared" / "data" / "multi30k" / "test_2016_flickr.en.gz"
REQUEST_TIMEOUT = 300.0  # seconds; an answer later than this counts as lost


# --- offline ---------------------------------------------------------------------------------

def offline(model: Path, sources: list[str], beam: int | None, precision: str
            ) -> dict[str, Any]:
    """The file translated by the library call `tfm translate --input` makes, load excluded."""
    from tfm.decoding.engines import load_translator

    translator = load_translator(model, "auto", precision, workers=None)  # as tfm translate does
    options = translator.default_options(beam=beam)
    translator.translate(sources[:20], options)  # warm-up, not timed
    start = time.perf_counter()
    texts = [t.text for t in translator.translate(sources, options)]
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "sent_per_s": len(sources) / seconds, "beam": options.beam,
            "workers": translator.workers.count, "texts": texts}


def offline_command(model: Path, sources: list[str], beam: int | None, precision: str,
                    work: Path) -> dict[str, Any]:
    """The whole `tfm translate --input FILE` command, start-up and model load included."""
    src, out = work / "src.txt", work / "offline.txt"
    src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    command = [sys.executable, "-m", "tfm", "translate", "-m", str(model), "--input", str(src),
               "--output", str(out), "--precision", precision] + (
                   ["--beam", str(beam)] if beam else [])
    start = time.perf_counter()
    subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "sent_per_s": len(sources) / seconds,
            "texts": out.read_text(encoding="utf-8").splitlines()}


# --- the server ------------------------------------------------------------------------------

class Server:
    """``tfm serve`` in a subprocess on a free loopback port; stderr goes to a file."""

    def __init__(self, model: Path, work: Path, name: str, *args: str) -> None:
        self.log = work / f"{name}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tfm", "serve", "-m", str(model), "--port", "0", *args],
            stdout=subprocess.DEVNULL, stderr=self.log.open("w"))
        self.url = self._wait_for_url()
        self.host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        deadline = time.monotonic() + 120
        while self.health() != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"tfm serve never became ready; see {self.log}")
            time.sleep(0.1)

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.process.poll() is None:
            for line in self.log.read_text(errors="replace").splitlines():
                if " on http://" in line:
                    return line.split(" on ")[1].split()[0]
            time.sleep(0.1)
        raise RuntimeError(f"tfm serve did not start:\n{self.log.read_text()}")

    def health(self) -> int | None:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def metrics(self) -> dict[str, float]:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as r:
            text = r.read().decode()
        return {s.name + json.dumps(s.labels, sort_keys=True): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --- the clients -----------------------------------------------------------------------------

class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON to /v1/translate."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(b"POST /v1/translate HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: "
                          b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (self.host.encode(), self.port, len(body), body))
        await self.writer.drain()
        status = int((await self.reader.readline()).split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        content = await self.reader.readexactly(int(headers.get("content-length", 0)))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, content

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def drive(server: Server, sources: list[str], clients: int, beam: int | None,
                retry_refused: bool = False, deadline_s: float = 3600.0) -> dict[str, Any]:
    """``clients`` closed-loop clients send ``sources``, one sentence per request, until every
    sentence has been sent (and, with ``retry_refused``, answered with a 200 after retries of
    its 503s). Latencies are of 200 answers."""
    work = deque(range(len(sources)))
    texts: list[str | None] = [None] * len(sources)
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    options = {"beam": beam} if beam else {}
    stop_at = time.monotonic() + deadline_s

    async def client() -> None:
        connection = Connection(server.host, server.port)
        while work and time.monotonic() < stop_at:
            i = work.popleft()
            body = json.dumps({"text": sources[i], "split": False, **options}).encode()
            start = time.perf_counter()
            try:
                status, headers, content = await asyncio.wait_for(connection.post(body),
                                                                  REQUEST_TIMEOUT)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError,
                    IndexError) as e:
                statuses[f"error: {type(e).__name__}"] += 1
                connection.close()
                continue
            statuses[str(status)] += 1
            if status == 200:
                latencies.append(time.perf_counter() - start)
                texts[i] = json.loads(content)["translations"][0]["text"]
            elif status == 503 and retry_refused:
                work.append(i)
                wait = min(float(headers.get("retry-after", "1")), 1.0)
                await asyncio.sleep(wait * random.uniform(0.5, 1.0))
        connection.close()

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    seconds = time.perf_counter() - start
    done = sum(t is not None for t in texts)
    return {"clients": clients, "seconds": seconds, "sent_per_s": done / seconds,
            "p50_ms": percentile(latencies, 50), "p95_ms": percentile(latencies, 95),
            "p99_ms": percentile(latencies, 99), "statuses": dict(statuses),
            "translated": done, "texts": texts}


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile, in milliseconds."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, round(p / 100 * len(ordered)))
    return 1000 * ordered[min(rank, len(ordered)) - 1]


def batch_stats(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Mean sentences and requests per batch between two /metrics readings."""

    def delta(name: str) -> float:
        return after.get(name + "{}", 0.0) - before.get(name + "{}", 0.0)

    batches = delta("tfm_serve_batch_sentences_count")
    return {"batches": batches,
            "mean_batch_sentences": delta("tfm_serve_batch_sentences_sum") / batches
            if batches else 0.0}


def run_levels(server: Server, sources: list[str], levels: list[int], beam: int | None,
               reference: list[str]) -> list[dict[str, Any]]:
    asyncio.run(drive(server, sources[:20], 4, beam))  # warm-up, not counted
    rows = []
    for clients in levels:
        before = server.metrics()
        row = asyncio.run(drive(server, sources, clients, beam))
        row.update(batch_stats(before, server.metrics()))
        row["identical"] = sum(t == r for t, r in zip(row.pop("texts"), reference))
        rows.append(row)
        print(f"  {clients:>4} clients: {row['sent_per_s']:8.1f} sent/s  p50 "
              f"{fmt(row['p50_ms'])} ms  mean batch {row['mean_batch_sentences']:.1f}",
              file=sys.stderr, flush=True)
    return rows


# --- the report ------------------------------------------------------------------------------

def fmt(value: float | None, spec: str = ",.0f") -> str:
    return "–" if value is None else format(value, spec)


def batched_name(workers: int) -> str:
    return "batched" if workers == 1 else f"batched_{workers}_workers"


def run_label(name: str) -> str:
    """"batched" -> "batched server", "batched_2_workers" -> "batched server, 2 workers"."""
    if name.startswith("batched_"):
        return f"batched server, {name.split('_')[1]} workers"
    return f"{name} server"


def table(results: dict[str, Any]) -> list[str]:
    base = results["offline"]["sent_per_s"]
    n = results["sentences"]
    lines = ["| run | clients | sentences/s | vs offline | p50 ms | p95 ms | p99 ms | mean "
             "batch | = offline |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| offline (translation only) | – | {base:,.1f} | 1.00 | – | – | – | – | – |",
             f"| `tfm translate` (whole command) | – | "
             f"{results['offline_command']['sent_per_s']:,.1f} | "
             f"{results['offline_command']['sent_per_s'] / base:.2f} | – | – | – | – | "
             f"{results['offline_command']['identical']}/{n} |"]
    for name in (*results.get("batched_runs", ["batched"]), "unbatched"):
        for row in results[name]:
            lines.append(
                f"| {run_label(name)} | {row['clients']} | {row['sent_per_s']:,.1f} | "
                f"{row['sent_per_s'] / base:.2f} | {fmt(row['p50_ms'])} | "
                f"{fmt(row['p95_ms'])} | {fmt(row['p99_ms'])} | "
                f"{row['mean_batch_sentences']:.1f} | {row['identical']}/{n} |")
    return lines


def summary(results: dict[str, Any]) -> list[str]:
    lines = []
    base = results["offline"]["sent_per_s"]
    unbatched = {row["clients"]: row for row in results["unbatched"]}
    for name in results.get("batched_runs", ["batched"]):
        batched = {row["clients"]: row for row in results[name]}
        if 32 in batched and 32 in unbatched:
            b, u = batched[32]["sent_per_s"], unbatched[32]["sent_per_s"]
            lines.append(f"- {run_label(name)}, 32 clients: {b / base:.0%} of offline "
                         f"throughput (goal >= 70%), {b / u:.1f}x the unbatched server "
                         "(goal >= 4x)")
    o = results["overload"]
    other = sum(v for k, v in o["statuses"].items() if k not in ("200", "503"))
    lines.append(f"- overload ({o['clients']} clients, --max-queue {o['max_queue']}, "
                 f"--workers {o.get('workers', 1)}): "
                 f"200: {o['statuses'].get('200', 0)}, 503: {o['statuses'].get('503', 0)}, "
                 f"anything else: {other}; sentences never translated: "
                 f"{o['sentences'] - o['translated']}; /health afterwards: {o['health_after']}")
    return lines


def main() -> None:
    keep_freed_memory()  # as the tfm command does (TFM_DEFAULT_MALLOC=1: glibc's default)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC)
    parser.add_argument("--out", type=Path, default=Path("runs/serve.json"))
    parser.add_argument("--clients", default="1,8,32,128")
    parser.add_argument("--workers", default="1,2", help="batched servers to run, by --workers")
    parser.add_argument("--beam", type=int, help="default: the model's")
    parser.add_argument("--limit", type=int, help="only the first N sentences (a quick check)")
    parser.add_argument("--precision", default="fp32", help="of every run (tfm --precision)")
    parser.add_argument("--overload-clients", type=int, default=256)
    parser.add_argument("--overload-queue", type=int, default=16)
    args = parser.parse_args()
    sources = read_text_lines(args.src)[: args.limit]
    levels = [int(c) for c in args.clients.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    results: dict[str, Any] = {"model": str(args.model), "src": str(args.src),
                               "sentences": len(sources), "cpus": os.cpu_count(),
                               "precision": args.precision}
    with tempfile.TemporaryDirectory(prefix="tfm-bench-serve-") as tmp:
        work = Path(tmp)
        print(f"offline: {len(sources)} sentences", file=sys.stderr, flush=True)
        off = offline(args.model, sources, args.beam, args.precision)
        reference = off.pop("texts")
        results["offline"] = off
        command = offline_command(args.model, sources, args.beam, args.precision, work)
        command["identical"] = sum(t == r for t, r in zip(command.pop("texts"), reference))
        results["offline_command"] = command
        common = (["--beam", str(args.beam)] if args.beam else []) + [
            "--precision", args.precision]
        runs = [(batched_name(w), ["--workers", str(w)]) for w in workers]
        results["batched_runs"] = [name for name, _ in runs]
        for name, extra in (*runs, ("unbatched", ["--max-batch-tokens", "1", "--workers", "1"])):
            print(f"{name} server", file=sys.stderr, flush=True)
            server = Server(args.model, work, name, *common, *extra)
            try:
                results[name] = run_levels(server, sources, levels, args.beam, reference)
            finally:
                server.stop()
        print("overload", file=sys.stderr, flush=True)
        server = Server(args.model, work, "overload", *common, "--max-queue",
                        str(args.overload_queue), "--workers", str(max(workers)))
        try:
            row = asyncio.run(drive(server, sources, args.overload_clients, args.beam,
                                    retry_refused=True, deadline_s=1800))
            row["identical"] = sum(t == r for t, r in zip(row.pop("texts"), reference))
            row.update(max_queue=args.overload_queue, workers=max(workers), sentences=len(sources),
                       health_after=server.health())
            results["overload"] = row
        finally:
            server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print("\n".join(table(results) + [""] + summary(results)))


if __name__ == "__main__":
    main()
