"""Compare agentq with DBOS (SQLite system database) on the same no-op workload, side by side.

Not part of the test run. Usage, from the project's virtual environment:

    python tests/bench/compare_dbos.py --tasks 2000 --repeats 3

DBOS is installed into a throwaway virtual environment (it never touches the
project's). DBOS runs as a user would run it on SQLite: its own defaults
(SQLite's rollback journal and ``synchronous=FULL``: durable commits), a queue
registered with ``worker_concurrency`` handlers per process polled every 10 ms
(its default is 1 s), two worker processes with their own executor ids, and a
no-op workflow that returns when it started. agentq runs its side as in
``compare_huey.py`` (:mod:`_compare`). Throughput is measured from the first
task start to the last one; every task's result is stored (DBOS's workflow
status, agentq's ledger).

Each round also measures enqueueing the same number of tasks one per commit
(``DBOSClient.enqueue``, DBOS's API for enqueueing from outside the workers,
against agentq transactions that each enqueue one task) and the latency from
an enqueue to its handler's start with one idle worker process
(:mod:`_compare` says how figures are summarised).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _compare import Round, main, run_other

DBOS_RUN = r"""
import json, subprocess, sys, time
from pathlib import Path
root = Path(sys.argv[1]); n = int(sys.argv[2]); workers = int(sys.argv[3])
concurrency = int(sys.argv[4]); samples = int(sys.argv[5])
url = f"sqlite:///{root / 'dbos.sqlite'}"
(root / "dbosapp.py").write_text(
    "import sys, threading, time\n"
    "from dbos import DBOS, DBOSConfig\n"
    "@DBOS.workflow()\n"
    "def noop(i):\n"
    "    return time.time()\n"
    "if __name__ == '__main__':\n"
    f"    DBOS(config=DBOSConfig(name='bench', system_database_url={url!r},\n"
    "                           executor_id=sys.argv[1], run_admin_server=False))\n"
    "    DBOS.launch()\n"
    f"    DBOS.register_queue('bench', worker_concurrency={concurrency},\n"
    "                        polling_interval_sec=0.01, on_conflict='always_update')\n"
    "    print('ready', flush=True)\n"
    "    threading.Event().wait()\n"
)

def start(name):
    proc = subprocess.Popen([sys.executable, "dbosapp.py", name], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise SystemExit(f"dbos worker {name} did not start")
    return proc

boot = start("boot")  # a launched application creates the system database
boot.terminate(); boot.wait(30)
from dbos import DBOSClient
client = DBOSClient(system_database_url=url)
options = {"queue_name": "bench", "workflow_name": "noop"}
began = time.perf_counter()
for i in range(n):
    client.enqueue(options, i)  # one enqueue per commit
enqueue_per_s = n / (time.perf_counter() - began)
procs = [start(f"worker-{w}") for w in range(workers)]
deadline = time.time() + 1500
try:
    while len(client.list_workflows(status="SUCCESS", load_input=False,
                                    load_output=False)) < n:
        if time.time() > deadline:
            raise SystemExit("dbos did not finish")
        time.sleep(0.5)
finally:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(30)
starts = sorted(w.output for w in client.list_workflows(status="SUCCESS", load_input=False))
assert len(starts) == n, f"{len(starts)} of {n} succeeded"
# Latency: one worker process, idle between samples.
procs = [start("latency")]
time.sleep(0.5)
gaps = []
try:
    for i in range(samples):
        handle = client.enqueue(options, i)
        committed = time.time()
        gaps.append((handle.get_result(polling_interval_sec=0.001) - committed) * 1000)
        time.sleep(0.02)
finally:
    procs[0].terminate()
    procs[0].wait(30)
print(json.dumps({"tasks_per_s": (n - 1) / (starts[-1] - starts[0]),
                  "enqueue_per_s": enqueue_per_s, "latency_ms": gaps}))
"""


def run_dbos(python: Path, args: argparse.Namespace) -> Round:
    """DBOS's processed tasks/s, enqueues/s and enqueue-to-start latencies."""
    got = run_other(python, DBOS_RUN, args.tasks, args.workers, args.concurrency,
                    args.latency_samples)  # fmt: skip
    return Round.of(got)


if __name__ == "__main__":
    main("dbos", "dbos>=3.4,<4", __doc__, 2000, run_dbos)
