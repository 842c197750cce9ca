"""The peers of ``compare_postgres.py``: procrastinate, pgqueuer and DBOS on
PostgreSQL, each run by a program of its own in a virtual environment of its own
(never the project's), against a fresh database of the same server.

Each program takes ``ROOT URL N WORKERS CONCURRENCY BATCH SAMPLES`` and prints one
JSON object last: ``enqueue_per_s`` (N tasks, one per commit, from one caller,
before any worker runs), ``tasks_per_s`` (WORKERS worker processes draining
them: (N - 1) / (last handler start - first handler start)), and ``latency_ms``
(SAMPLES times, with one idle worker process: milliseconds from the return of
an enqueue call, its commit, to the handler's start, 20 ms apart).

A no-op handler records when it started: procrastinate and pgqueuer append
``<i> <time>`` to a file per worker process (an ``O_APPEND`` write, no fsync:
cheaper than any result store); DBOS's workflow returns the time, which DBOS
stores as its output, as ``compare_dbos.py`` does. A round only counts once
every task is finished by the peer's own account (procrastinate: job status
``succeeded``; pgqueuer: the queue table empty, each job's completion logged;
DBOS: workflow status ``SUCCESS``).

How each is set up, as its documentation suggests for throughput:

* procrastinate: ``PsycopgConnector`` with a pool of ``concurrency + 2``,
  ``run_worker(concurrency=...)`` with an ``async`` no-op task (its docs: no
  concurrency for blocking sync tasks), LISTEN/NOTIFY on (its default), jobs
  kept (its default ``delete_jobs="never"``); ``defer`` one job per call.
* pgqueuer: asyncpg (its first driver), ``run(batch_size=BATCH)``, an ``async``
  entrypoint; ``Queries.enqueue`` one job per call.
* DBOS: a queue with ``worker_concurrency=CONCURRENCY`` per process polled every
  10 ms (its default is 1 s), ``DBOSClient.enqueue`` one workflow per call.
"""

from __future__ import annotations

__all__ = ["FLOORS", "PEERS", "Peer"]

from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    """A peer: its pinned requirement and the program that measures it."""

    name: str
    requirements: tuple[str, ...]
    program: str


_COMMON = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path
root = Path(sys.argv[1]); url = sys.argv[2]; n = int(sys.argv[3]); workers = int(sys.argv[4])
concurrency = int(sys.argv[5]); batch = int(sys.argv[6]); samples = int(sys.argv[7])

started = [0]

def start_workers(count):
    procs = []
    for _ in range(count):
        started[0] += 1
        path = root / f"starts-{started[0]}.txt"
        p = subprocess.Popen([sys.executable, str(root / "worker.py"), url, str(path),
                              str(concurrency), str(batch)],
                             cwd=root, stdout=subprocess.PIPE, text=True,
                             stderr=open(path.with_suffix(".log"), "w"))  # read on failure
        procs.append(p)
    for p in procs:
        line = p.stdout.readline().strip()
        if line != "ready":
            for q in procs:
                q.kill()
            logs = " | ".join(f.read_text()[-2000:] for f in root.glob("starts-*.log"))
            raise SystemExit(f"worker did not start: {line} {logs}")
    return procs

def stop_workers(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill(); p.communicate()

def starts():
    got = {}
    for f in root.glob("starts-*.txt"):
        for line in f.read_text().splitlines():
            i, t = line.split()
            got[int(i)] = float(t)
    return got

def wait_until(done, what, seconds=1800):
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not finish")
        time.sleep(0.05)

def file_latency(enqueue):
    gaps = []
    for s in range(samples):
        i = n + s
        enqueue(i)
        committed = time.time()
        deadline = time.monotonic() + 10
        while (t := starts().get(i)) is None:
            if time.monotonic() > deadline:
                raise SystemExit("latency sample did not run in 10 s")
            time.sleep(0.001)
        gaps.append((t - committed) * 1000)
        time.sleep(0.02)
    return gaps
"""

_PROCRASTINATE = (
    _COMMON
    + r'''
(root / "worker.py").write_text("""
import asyncio, os, sys, time
from procrastinate import App, PsycopgConnector
url, path, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
app = App(connector=PsycopgConnector(conninfo=url, min_size=2, max_size=concurrency + 2))
@app.task(queue="bench", name="noop")
async def noop(i):
    os.write(fd, f"{i} {time.time()}\\n".encode())
async def main():
    async with app.open_async():
        print("ready", flush=True)
        await app.run_worker_async(queues=["bench"], concurrency=concurrency, wait=True)
asyncio.run(main())
""")
from procrastinate import App, PsycopgConnector
app = App(connector=PsycopgConnector(conninfo=url))
noop = app.task(queue="bench", name="noop")(lambda i: None)
import psycopg
with app.open():
    app.schema_manager.apply_schema()
    began = time.perf_counter()
    for i in range(n):
        noop.defer(i=i)  # one job per call, one commit each
    enqueue_per_s = n / (time.perf_counter() - began)
    db = psycopg.connect(url, autocommit=True)
    def succeeded():
        sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        return db.execute(sql).fetchone()[0]
    procs = start_workers(workers)
    try:
        wait_until(lambda: succeeded() >= n, "procrastinate")
    finally:
        stop_workers(procs)
    got = sorted(starts().values())
    assert len(got) == n, f"{len(got)} of {n} started"
    procs = start_workers(1)
    try:
        time.sleep(0.5)
        gaps = file_latency(lambda i: noop.defer(i=i))
    finally:
        stop_workers(procs)
print(json.dumps({"tasks_per_s": (n - 1) / (got[-1] - got[0]), "enqueue_per_s": enqueue_per_s,
                  "latency_ms": gaps}))
'''
)

_PGQUEUER = (
    _COMMON
    + r'''
(root / "worker.py").write_text("""
import asyncio, os, signal, sys, time
import asyncpg
from pgqueuer import PgQueuer
url, path, concurrency, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
async def main():
    conn = await asyncpg.connect(url)
    pgq = PgQueuer.from_asyncpg_connection(conn)
    @pgq.entrypoint("noop")
    async def noop(job):
        os.write(fd, f"{job.payload.decode()} {time.time()}\\n".encode())
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
    print("ready", flush=True)
    await pgq.run(batch_size=batch)
    await conn.close()
asyncio.run(main())
""")
import asyncio
import asyncpg
from pgqueuer import AsyncpgDriver, Queries

async def enqueue_all():
    conn = await asyncpg.connect(url)
    q = Queries(AsyncpgDriver(conn))
    await q.install()
    began = time.perf_counter()
    for i in range(n):
        await q.enqueue("noop", str(i).encode())  # one job per call, one commit each
    rate = n / (time.perf_counter() - began)
    await conn.close()
    return rate

async def remaining():
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        await conn.close()

enqueue_per_s = asyncio.run(enqueue_all())
procs = start_workers(workers)
try:
    wait_until(lambda: len(starts()) >= n and asyncio.run(remaining()) == 0, "pgqueuer")
finally:
    stop_workers(procs)
got = sorted(starts().values())
assert len(got) == n, f"{len(got)} of {n} started"

async def one(i, state={}):
    if "q" not in state:
        state["conn"] = await asyncpg.connect(url)
        state["q"] = Queries(AsyncpgDriver(state["conn"]))
    await state["q"].enqueue("noop", str(i).encode())

loop = asyncio.new_event_loop()
procs = start_workers(1)
try:
    time.sleep(0.5)
    gaps = file_latency(lambda i: loop.run_until_complete(one(i)))
finally:
    stop_workers(procs)
print(json.dumps({"tasks_per_s": (n - 1) / (got[-1] - got[0]), "enqueue_per_s": enqueue_per_s,
                  "latency_ms": gaps}))
'''
)

_DBOS = (
    _COMMON
    + r'''
(root / "worker.py").write_text("""
import sys, threading, time
from dbos import DBOS, DBOSConfig
url, concurrency = sys.argv[1], int(sys.argv[3])
name = sys.argv[2].rsplit("/", 1)[-1]
@DBOS.workflow()
def noop(i):
    return time.time()
DBOS(config=DBOSConfig(name="bench", system_database_url=url, executor_id=name,
                       run_admin_server=False))
DBOS.launch()
DBOS.register_queue("bench", worker_concurrency=concurrency, polling_interval_sec=0.01,
                    on_conflict="always_update")
print("ready", flush=True)
threading.Event().wait()
""")
boot = start_workers(1)  # a launched application creates its system tables
stop_workers(boot)
from dbos import DBOSClient
client = DBOSClient(system_database_url=url)
options = {"queue_name": "bench", "workflow_name": "noop"}
began = time.perf_counter()
for i in range(n):
    client.enqueue(options, i)  # one workflow per call, one commit each
enqueue_per_s = n / (time.perf_counter() - began)
def succeeded():
    return client.list_workflows(status="SUCCESS", load_input=False, load_output=False)
procs = start_workers(workers)
try:
    wait_until(lambda: len(succeeded()) >= n, "dbos")
finally:
    stop_workers(procs)
got = sorted(w.output for w in client.list_workflows(status="SUCCESS", load_input=False))
assert len(got) == n, f"{len(got)} of {n} succeeded"
procs = start_workers(1)
gaps = []
try:
    time.sleep(0.5)
    for s in range(samples):
        handle = client.enqueue(options, n + s)
        committed = time.time()
        gaps.append((handle.get_result(polling_interval_sec=0.001) - committed) * 1000)
        time.sleep(0.02)
finally:
    stop_workers(procs)
print(json.dumps({"tasks_per_s": (n - 1) / (got[-1] - got[0]), "enqueue_per_s": enqueue_per_s,
                  "latency_ms": gaps}))
'''
)

_BARE = (
    _COMMON
    + r'''
SCHEMA = """
CREATE TABLE bare_q (id bigserial PRIMARY KEY, task_id text NOT NULL, payload bytea NOT NULL,
                     visible_at bigint NOT NULL, lease_seq bigint NOT NULL DEFAULT 0);
CREATE INDEX bare_q_visible ON bare_q (visible_at, id);
CREATE TABLE bare_records (k text PRIMARY KEY, v text NOT NULL);
"""
ENQUEUE = (  # the message and its task's record, one statement: one commit, one round trip
    "WITH q AS (INSERT INTO bare_q (task_id, payload, visible_at) VALUES (%s, %s, 0) "
    "RETURNING task_id), r AS (INSERT INTO bare_records (k, v) SELECT task_id, %s FROM q "
    "RETURNING 1) SELECT pg_notify('bare_work', '') FROM r"
)
(root / "worker.py").write_text("""
import json, os, signal, sys, threading, time
import psycopg
url, path, concurrency, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
# Leases are bookkeeping (a lost one only redelivers): not waited on to disk, as agentq's.
claims = psycopg.connect(url, autocommit=True, options="-c synchronous_commit=off")
completions = psycopg.connect(url, autocommit=True)
listener = psycopg.connect(url, autocommit=True)
listener.execute("LISTEN bare_work")
# Lease the ready messages (a new lease sequence: the token) and mark their tasks
# running, reading each task's record with it: one statement.
CLAIM = (
    "WITH c AS (SELECT id FROM bare_q WHERE visible_at <= %(now)s ORDER BY visible_at, id "
    "LIMIT %(batch)s FOR UPDATE SKIP LOCKED), "
    "l AS (UPDATE bare_q AS q SET lease_seq = q.lease_seq + 1, visible_at = %(expiry)s "
    "FROM c WHERE q.id = c.id RETURNING q.id, q.task_id, q.lease_seq, q.payload), "
    "r AS (UPDATE bare_records AS r SET v = replace(r.v, '\\"status\\":\\"queued\\"', "
    "'\\"status\\":\\"running\\"') FROM l WHERE r.k = l.task_id RETURNING r.k, r.v) "
    "SELECT l.id, l.task_id, l.lease_seq, l.payload, r.v FROM l JOIN r ON r.k = l.task_id"
)
# The acks, fenced by the lease sequence, and the outcomes written from the record
# read at claim time, compare-and-swapped: one statement, one durable commit. A stale
# ack deletes nothing, so its outcome is never recorded.
COMPLETE = (
    "WITH x AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[], "
    "%s::text[]) AS x(id, seq, k, old, new)), "
    "acked AS (DELETE FROM bare_q AS q USING x WHERE q.id = x.id AND q.lease_seq = x.seq "
    "RETURNING x.k, x.old, x.new) "
    "UPDATE bare_records AS r SET v = acked.new FROM acked WHERE r.k = acked.k "
    "AND r.v = acked.old RETURNING 1"
)
print("ready", flush=True)
while not stop.is_set():
    now = int(time.time() * 1e6)
    lease = {"now": now, "batch": batch, "expiry": now + 30_000_000}
    rows = claims.execute(CLAIM, lease).fetchall()
    if not rows:
        for _ in listener.notifies(timeout=0.05, stop_after=1):
            pass
        continue
    ids, seqs, keys, olds, news = [], [], [], [], []
    for mid, task_id, seq, payload, old in rows:
        started = time.time()
        os.write(fd, f"{payload.decode()} {started}\\n".encode())
        record = json.loads(old)
        record["status"] = "succeeded"
        record["result"] = {"started": started}
        ids.append(mid); seqs.append(seq); keys.append(task_id); olds.append(old)
        news.append(json.dumps(record, separators=(",", ":")))
    written = completions.execute(COMPLETE, (ids, seqs, keys, olds, news)).fetchall()
    if len(written) != len(rows):
        print(f"stale acks: {len(rows) - len(written)}", file=sys.stderr, flush=True)
""")
import json
import psycopg
db = psycopg.connect(url, autocommit=True)
db.execute(SCHEMA)
began = time.perf_counter()
for i in range(n):  # one task per commit
    db.execute(ENQUEUE, (f"t{i}", str(i).encode(), json.dumps({"status": "queued", "n": i})))
enqueue_per_s = n / (time.perf_counter() - began)
db.execute("ANALYZE bare_q, bare_records")  # the floor: plans with statistics
procs = start_workers(workers)
try:
    wait_until(lambda: len(starts()) >= n
               and db.execute("SELECT count(*) FROM bare_q").fetchone()[0] == 0, "bare SQL")
finally:
    stop_workers(procs)
got = sorted(starts().values())
assert len(got) == n, f"{len(got)} of {n} started"
succeeded = db.execute(
    "SELECT count(*) FROM bare_records WHERE v LIKE '%%\"status\":\"succeeded\"%%'"
).fetchone()[0]
assert succeeded == n, f"{succeeded} of {n} recorded succeeded"
procs = start_workers(1)
try:
    time.sleep(0.5)
    gaps = file_latency(lambda i: db.execute(
        ENQUEUE, (f"t{i}", str(i).encode(), json.dumps({"status": "queued", "n": i}))))
finally:
    stop_workers(procs)
print(json.dumps({"tasks_per_s": (n - 1) / (got[-1] - got[0]), "enqueue_per_s": enqueue_per_s,
                  "latency_ms": gaps}))
'''
)

#: The peers, by name, with the versions the comparison is pinned to. ``bare`` is
#: not a peer but the floor: bare SQL with agentq's guarantees (the lease marks the
#: task running; the outcome, written from the record read at claim time, and the
#: ack fenced by the lease commit together; a stale ack records nothing), two
#: statements a batch, through psycopg as agentq's own driver.
PEERS = {
    "procrastinate": Peer("procrastinate", ("procrastinate==3.10.0",), _PROCRASTINATE),
    "pgqueuer": Peer("pgqueuer", ("pgqueuer[asyncpg]==1.6.0",), _PGQUEUER),
    "dbos": Peer("dbos", ("dbos==3.4.0",), _DBOS),
    "bare": Peer("bare", ("psycopg[binary]==3.3.9",), _BARE),
}
#: What is a floor to compare with, not a peer to beat.
FLOORS = {"bare"}
