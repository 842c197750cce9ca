"""The waiter herd (issue 27 item 10): 300 enqueues over HTTP with 0 and with
500 parked ``Prefer: wait`` long-polls on other tasks.

Not part of the test run. Usage, from the project's virtual environment:

    python tests/bench/waiter_herd.py --rounds 5

Each run makes a SQLite file with the tasks the waiters will wait on, starts a
fresh ``agentq serve`` process on it (``--insecure-local``, the refund bot's
tools and policies), parks ``--waiters`` long-polls on them (``Prefer:
wait=120``, each on its own task, from one asyncio client), then times
``--enqueues`` enqueues one after another from another client, and stops the
server. Runs with and without waiters alternate (a shared machine's speed moves
between them); the figures are medians over ``--rounds`` with min and max, and
the ratio is the median of the per-round ratios. The goal: within 1.2x.

``--plain`` writes no ``[servers]`` section (to measure a version without one;
the default per-principal cap of 100 would refuse 500 waiters of one principal).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def _start(folder: Path, plain: bool) -> tuple[subprocess.Popen[str], str]:
    config = folder / "agentq.toml"
    text = (f'[agentq]\ndb = "sqlite:///{folder / "herd.db"}"\ntools = "{ROOT / "tools"}"\n'
            f'policies = "{ROOT / "policies"}"\n')  # fmt: skip
    if not plain:
        text += "\n[servers]\nmax_waits_per_principal = 100000\nmax_connections = 10000\n"
    config.write_text(text)
    log = folder / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentq.cli", "serve", "--insecure-local", "--port", "0",
             "--config", str(config), "--max-wait", "600"],
            cwd=folder, stdout=subprocess.DEVNULL, stderr=out, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"(http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"agentq serve did not start:\n{log.read_text()}")


def _refund(order: str) -> dict[str, object]:
    return {"args": {"order_id": order, "amount": 30}}


def _targets(folder: Path, count: int) -> list[str]:
    """``count`` tasks for the waiters, made before the server starts (in one
    transaction: no HTTP client reuses a connection the server closed meanwhile)."""
    from agentq import Runtime

    rt = Runtime(f"sqlite:///{folder / 'herd.db'}", tools=ROOT / "tools",
                 policies=ROOT / "policies")  # fmt: skip
    try:
        made = rt.transact(lambda tx: [
            tx.enqueue("execute_refund", {"order_id": f"w{i}", "amount": 30}).task_id
            for i in range(count)])  # fmt: skip
    finally:
        rt.close()
    return list(made)


async def _parked(url: str, targets: list[str]) -> list[asyncio.Task[httpx.Response]]:
    """One long-poll on each of ``targets``, parked on the server."""
    count = len(targets)
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
    client = httpx.AsyncClient(base_url=url, timeout=600, limits=limits)
    tasks = [asyncio.ensure_future(client.get(f"/v1/tasks/{t}", headers={"Prefer": "wait=120"}))
             for t in targets]  # fmt: skip
    await asyncio.sleep(2.0)  # let them reach the server and park
    still = sum(not t.done() for t in tasks)
    if still != count:
        raise RuntimeError(f"only {still} of {count} long-polls stayed parked")
    return tasks


async def _timed_enqueues(url: str, count: int) -> float:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        start = time.perf_counter()
        for i in range(count):
            answer = await client.post("/v1/tools/execute_refund/actions", json=_refund(f"e{i}"))
            answer.raise_for_status()
        return time.perf_counter() - start


def one_run(waiters: int, enqueues: int, plain: bool) -> float:
    """Seconds for ``enqueues`` enqueues with ``waiters`` parked long-polls."""
    with tempfile.TemporaryDirectory(prefix="agentq-herd-") as tmp:
        targets = _targets(Path(tmp), waiters)
        proc, url = _start(Path(tmp), plain)
        try:

            async def run() -> float:
                parked = await _parked(url, targets) if waiters else []
                took = await _timed_enqueues(url, enqueues)
                for task in parked:
                    task.cancel()
                await asyncio.gather(*parked, return_exceptions=True)
                return took

            try:
                return asyncio.run(run())
            except Exception:
                print((Path(tmp) / "serve.log").read_text()[-3000:], file=sys.stderr)
                raise
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--waiters", type=int, default=500)
    parser.add_argument("--enqueues", type=int, default=300)
    parser.add_argument("--plain", action="store_true", help="no [servers] section")
    args = parser.parse_args()
    idle: list[float] = []
    busy: list[float] = []
    for _ in range(args.rounds):
        idle.append(one_run(0, args.enqueues, args.plain))
        busy.append(one_run(args.waiters, args.enqueues, args.plain))
        print(f"round: 0 waiters {idle[-1]:.2f} s, {args.waiters} waiters {busy[-1]:.2f} s",
              file=sys.stderr, flush=True)  # fmt: skip
    ratios = [b / i for i, b in zip(idle, busy, strict=True)]
    report = {
        "enqueues": args.enqueues,
        "waiters": args.waiters,
        "rounds": args.rounds,
        "seconds_without_waiters": {"median": statistics.median(idle), "min": min(idle),
                                    "max": max(idle)},
        "seconds_with_waiters": {"median": statistics.median(busy), "min": min(busy),
                                 "max": max(busy)},
        "ratio_median": statistics.median(ratios),
        "ratios": ratios,
    }  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
