"""The CLI: worker as a real process with SIGTERM, inspect, tasks, dlq list/replay; no URL
secret in its log or output; clean errors for malformed policy and config files."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agentq import Runtime, TaskStatus
from agentq.demo_server import DemoAPI
from agentq.ledger import Tables

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def agentq(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentq.cli", *args], cwd=cwd, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_worker_process_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'w.db'}"
    with DemoAPI() as api:
        rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies")
        ids = [rt.enqueue_action("execute_refund", {"order_id": f"c{i}", "amount": 5}).task_id
               for i in range(20)]  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentq.cli", "worker", "--db", db, "--setting",
             f"payments_url={api.url}"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if all(rt.task(i).status == TaskStatus.SUCCEEDED for i in ids):
                    break
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err
        assert "stopped" in out
        assert all(rt.task(i).status == TaskStatus.SUCCEEDED for i in ids)
        assert len(api.applied()) == 20
        rt.close()


def test_inspect_tasks_and_dead_letter_replay(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                 settings={"payments_url": "http://not-allowed.example"})  # fmt: skip
    task = rt.enqueue_action("execute_refund", {"order_id": "x", "amount": 5})
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.DEAD
    rt.close()

    inspect = agentq("inspect", "--db", db, "--json")
    assert inspect.returncode == 0, inspect.stderr
    report = json.loads(inspect.stdout)
    assert report["dead_letters"] == 1
    assert {q["queue"] for q in report["queues"]} >= {"payments", "escalations"}

    listed = agentq("dlq", "list", "--db", db, "--jsonl")
    assert json.loads(listed.stdout.splitlines()[0])["task_id"] == task.task_id

    with DemoAPI() as api:
        replay = agentq("dlq", "replay", task.task_id, "--db", db, "--tools", str(ROOT / "tools"),
                        "--policies", str(ROOT / "policies"))  # fmt: skip
        assert f"replayed {task.task_id} as attempt 2" in replay.stdout
        rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                     settings={"payments_url": api.url})  # fmt: skip
        rt.worker().drain()
        assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
        rt.close()

    tasks = agentq("tasks", "--db", db, "--status", "succeeded")
    assert task.task_id in tasks.stdout


def test_dlq_replay_and_delete_refuse_what_they_cannot_do(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/d.db"
    rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                 settings={"payments_url": "http://not-allowed.example"})  # fmt: skip
    dead = rt.enqueue_action("execute_refund", {"order_id": "x", "amount": 5})
    rt.worker().drain()
    rt.backend.transact(lambda tx: tx.send("payments", (dead.task_id, 9), "stray row"))
    rt.worker().drain()
    entries = {e["entry_id"]: e for e in rt.dead_letters()}
    assert len(entries) == 2
    stray = next(i for i, e in entries.items() if e["stray"])
    rt.close()

    bare = agentq("dlq", "replay", "--db", db)
    assert bare.returncode == 2 and "name entry ids or give --all" in bare.stderr
    project = ["--tools", str(ROOT / "tools"), "--policies", str(ROOT / "policies")]
    unconfirmed_replay = agentq("dlq", "replay", "--all", "--db", db, *project)
    assert unconfirmed_replay.returncode == 2 and "replay 2 entries: confirm with --yes" in (
        unconfirmed_replay.stderr
    )
    everything = agentq("dlq", "replay", "--all", "--yes", "--db", db, *project)
    assert everything.returncode == 1, everything.stderr
    assert f"replayed {dead.task_id}" in everything.stdout
    assert f"skipped {stray}: " in everything.stderr and "Traceback" not in everything.stderr
    assert "1 replayed, 1 skipped" in everything.stdout
    again = agentq("dlq", "replay", dead.task_id, "--db", db, *project)  # now queued, not dead
    assert again.returncode == 1 and "is queued: replay is not allowed" in again.stderr

    unconfirmed = agentq("dlq", "delete", "--all", "--db", db)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    deleted = agentq("dlq", "delete", stray, "nope", "--db", db)
    assert deleted.returncode == 1 and "1 deleted" in deleted.stdout
    assert "no dead-letter entry nope" in deleted.stderr
    assert agentq("dlq", "list", "--db", db, "--jsonl").stdout == ""


def test_bad_database_url_is_a_clear_error() -> None:
    proc = agentq("inspect", "--db", "mysql://nope")
    assert proc.returncode == 2
    assert "unknown database URL scheme 'mysql'" in proc.stderr
    assert "Traceback" not in proc.stderr
    # A known scheme whose server cannot be reached names it, without a traceback.
    unreachable = agentq("inspect", "--db", "postgresql://127.0.0.1:1/nope")
    assert unreachable.returncode != 0 and "Traceback" not in unreachable.stderr
    assert unreachable.stderr.startswith("agentq: error: PostgreSQL at 127.0.0.1:1/nope")


def test_init_prints_spanner_ddl_for_both_dialects() -> None:
    pytest.importorskip("google.cloud.spanner")
    base = "spanner://projects/p/instances/i/databases/d?endpoint=127.0.0.1:1"
    gsql = agentq("init", "--db", base, "--print-ddl")
    assert gsql.returncode == 0, gsql.stderr
    expected = (
        "CREATE QUEUE IF NOT EXISTS payments (task_id STRING(MAX) NOT NULL, "
        "attempt INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (task_id, attempt);"
    )
    assert expected in gsql.stdout
    pg = agentq("init", "--db", base + "&dialect=postgresql", "--print-ddl")
    assert "CREATE QUEUE IF NOT EXISTS payments (task_id varchar NOT NULL" in pg.stdout


def test_agentq_toml_supplies_defaults_and_bad_files_are_clear(tmp_path: Path) -> None:
    (tmp_path / "agentq.toml").write_text(
        f'[agentq]\ndb = "sqlite:///{tmp_path}/c.db"\ntools = "{ROOT / "tools"}"\n'
        f'policies = "{ROOT / "policies"}"\n\n[settings]\npayments_url = "http://127.0.0.1:9"\n'
    )
    init = agentq("init", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    assert f"sqlite:///{tmp_path}/c.db: queues" in init.stdout
    (tmp_path / "agentq.toml").write_text("[agentq]\ndatabase = 'x'\n")
    bad = agentq("init", cwd=tmp_path)
    assert bad.returncode == 2
    assert "agentq.database" in bad.stderr and "unknown key" in bad.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["worker", "--concurrency", "0"], "--concurrency: must be at least 1"),
        (["bench", "--tasks", "0"], "--tasks: must be at least 1"),
        (["bench", "--payload-bytes", "-1"], "--payload-bytes: must not be negative"),
        (["bench", "--idle-seconds", "0"], "--idle-seconds: must be above 0"),
    ],
)
def test_bad_numbers_are_clear_errors(args: list[str], message: str) -> None:
    proc = agentq(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


# -- defect 13: no secret of a failing call's URL in the worker's log or the CLI's output --

PASSWORD = "pw-5d2a91"
API_KEY = "key-c03f7e"

CHARGE_TOOL = """
from pydantic import BaseModel
from agentq import ToolContext, tool


class Charge(BaseModel):
    order_id: str


@tool(queue="payments")
def charge(ctx: ToolContext, args: Charge) -> None:
    url = ctx.settings["charge_url"]
    ctx.logger.info("charging through %s", url)
    ctx.http.post(url, json={"order": args.order_id}).raise_for_status()
"""


class _Failing(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def failing_api() -> Iterator[str]:
    """A loopback API answering 500 to every POST; its URL carries both secrets."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        yield f"http://shop:{PASSWORD}@127.0.0.1:{port}/charge?api_key={API_KEY}&v=2"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _charge_project(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "charging.py").write_text(CHARGE_TOOL)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.toml").write_text(
        '[tools.charge]\nallowed_hosts = ["127.0.0.1"]\nmax_attempts = 1\n'
    )
    return tmp_path / "tools", tmp_path / "policies"


def _assert_clean(text: str) -> None:
    assert PASSWORD not in text
    assert API_KEY not in text


@pytest.mark.parametrize("log_args", [[], ["--log-level", "debug", "--log-format", "json"]])
def test_worker_log_and_cli_output_carry_no_url_secrets(
    tmp_path: Path, failing_api: str, log_args: list[str]
) -> None:
    tools, policies = _charge_project(tmp_path)
    db = f"sqlite:///{tmp_path / 's.db'}"
    common = ["--db", db, "--tools", str(tools), "--policies", str(policies)]
    rt = Runtime(db, tools=tools, policies=policies)
    task = rt.enqueue_action("charge", {"order_id": "o1"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", "worker", *common, *log_args,
         "--setting", f"charge_url={failing_api}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and rt.task(task.task_id).status != TaskStatus.DEAD:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    rt.close()
    assert proc.returncode == 0, err
    _assert_clean(out + err)
    # The handler's own line is there, redacted; the worker's one line for the task too.
    redacted_url = failing_api.replace(PASSWORD, "REDACTED").replace(API_KEY, "REDACTED")
    assert f"charging through {redacted_url}" in err
    task_lines = [line for line in err.splitlines() if f"task {task.task_id} dead" in line]
    assert len(task_lines) == 1, err
    if log_args:
        entry = json.loads(task_lines[0])
        assert entry["level"] == "INFO" and entry["logger"] == "agentq.tasks"
        assert (entry["task_id"], entry["tool"], entry["attempt"], entry["outcome"]) == (
            task.task_id, "charge", 1, "dead",
        )  # fmt: skip
        assert "api_key=REDACTED" in entry["error"]
    assert "HTTP Request" not in err  # httpx's INFO lines stay off

    for command in (["tasks"], ["dlq", "list"]):
        listed = agentq(*command, "--db", db, "--jsonl")
        assert listed.returncode == 0, listed.stderr
        assert task.task_id in listed.stdout and "REDACTED" in listed.stdout
        _assert_clean(listed.stdout + listed.stderr)


def test_cli_redacts_secrets_recorded_before_redaction_existed(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'old.db'}"
    rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies")
    leaked = f"HTTPStatusError: for url 'http://u:{PASSWORD}@h/x?api_key={API_KEY}'"
    rt.transact(lambda tx: tx.tx.put_record(
        Tables.DEAD_LETTERS, "t-old", {"task_id": "t-old", "tool": "charge", "error": leaked},
    ))  # fmt: skip
    rt.close()
    listed = agentq("dlq", "list", "--db", db, "--jsonl")
    assert listed.returncode == 0, listed.stderr
    entry = json.loads(listed.stdout)
    assert entry["error"] == "HTTPStatusError: for url 'http://u:REDACTED@h/x?api_key=REDACTED'"


# -- defect 14: malformed policy and config files are clean errors on every command --

MALFORMED_POLICY = {
    "tools-not-a-table": b"tools = [1]\n",
    "approvals-not-an-array": b"approvals = 5\n",
    "huge-duration": b'[defaults]\nescalate_after = "99999999999d"\n',
    "huge-number-duration": b"[tools.execute_refund]\ntimeout = 1e300\n",
    "not-utf8": b"[tools.execute_refund]\nallowed_hosts = ['caf\xe9']\n",
    "bad-syntax": b"[tools.execute_refund\n",
}


def _assert_clean_error(proc: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("agentq: error: "), proc.stderr
    for part in parts:
        assert part in proc.stderr


@pytest.mark.parametrize("case", sorted(MALFORMED_POLICY))
def test_malformed_policy_is_a_clean_cli_error(tmp_path: Path, case: str) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "bad.toml").write_bytes(MALFORMED_POLICY[case])
    proc = agentq("init", "--db", f"sqlite:///{tmp_path / 'a.db'}", "--tools", str(ROOT / "tools"),
                  "--policies", str(tmp_path / "policies"))  # fmt: skip
    _assert_clean_error(proc, f"policy file {tmp_path / 'policies' / 'bad.toml'}")


@pytest.mark.parametrize(
    "command",
    [["worker"], ["init"], ["enqueue", "execute_refund", "--args", "{}"],
     ["dlq", "replay", "t1"], ["demo"]],
)  # fmt: skip
def test_every_command_reports_a_bad_policy_cleanly(tmp_path: Path, command: list[str]) -> None:
    """Every command that loads the project's policy (read-only ones do not)."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "bad.toml").write_bytes(MALFORMED_POLICY["tools-not-a-table"])
    (tmp_path / "tools").symlink_to(ROOT / "tools")
    db = [] if command == ["demo"] else ["--db", f"sqlite:///{tmp_path / 'a.db'}"]
    proc = agentq(*command, *db, "--policies", str(tmp_path / "policies"), cwd=tmp_path)
    _assert_clean_error(proc, "bad.toml", "tools = [1]")


def test_inspect_reports_a_bad_config_file_cleanly(tmp_path: Path) -> None:
    (tmp_path / "agentq.toml").write_bytes(b"[agentq]\ndb = '\xff'\n")
    proc = agentq("inspect", cwd=tmp_path)
    _assert_clean_error(proc, "agentq.toml: not UTF-8")
