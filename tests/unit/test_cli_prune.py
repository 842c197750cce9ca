"""``agentq prune`` (issue 14): counts printed, --older-than, --dry-run, the
config file's retention, --vacuum, and bad input as ``agentq: error: ...``."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.cli import main


class Args(BaseModel):
    n: int


@tool(queue="work")
def job(ctx: ToolContext, args: Args) -> dict[str, Any]:
    return {}


def _ledger(path: Path, ages_in_days: list[float]) -> str:
    """A database with one succeeded task per age (days ago, in real time)."""
    url = f"sqlite:///{path}"
    oldest = max(ages_in_days)
    # The prune CLI runs in a subprocess and ages records by the real clock.
    clock = FakeClock(datetime.now(UTC) - timedelta(days=oldest))
    with Runtime(url, tools=[job], clock=clock) as rt:
        for i, age in enumerate(sorted(ages_in_days, reverse=True)):
            clock.set(datetime.now(UTC) - timedelta(days=age))
            rt.enqueue_action("job", {"n": i}, idempotency_key=f"k{i}")
            rt.worker().drain()
    return url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["prune", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_prune_deletes_what_is_past_the_retention_and_prints_the_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = _ledger(tmp_path / "a.db", [10, 9, 1])
    status, out, _ = run(capsys, "--db", url, "--dry-run")
    assert status == 0
    assert out.startswith("would delete 2 task(s), 0 approval(s), 2 idempotency key(s)")
    assert "retention: 7d;" in out
    status, out, _ = run(capsys, "--db", url)
    assert status == 0 and out.startswith("deleted 2 task(s)")
    status, out, _ = run(capsys, "--db", url)
    assert out.startswith("deleted 0 task(s)")
    # Below the 7-day retention: it is asked for (issue 27, item 14).
    status, out, _ = run(capsys, "--db", url, "--older-than", "12h", "--json", "--yes")
    doc = json.loads(out)
    assert doc["pruned"]["tasks"] == 1 and doc["pruned"]["dry_run"] is False
    with Runtime(url) as rt:
        assert rt.tasks() == []


def test_the_config_files_retention_is_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = _ledger(tmp_path / "c.db", [3, 1])
    (tmp_path / "agentq.toml").write_text(f'[agentq]\ndb = "{url}"\nretention = "2d"\n')
    status, out, _ = run(capsys)
    assert status == 0 and out.startswith("deleted 1 task(s)") and "retention: 48h;" in out
    (tmp_path / "agentq.toml").write_text(f'[agentq]\ndb = "{url}"\nretention = "off"\n')
    status, out, _ = run(capsys)
    assert status == 0 and "retention is off for every tool" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--older-than", "soon"], "agentq: error: --older-than: invalid duration 'soon'"),
        (["--older-than=-1d"], "agentq: error: --older-than: invalid duration '-1d'"),
        (["--vacuum", "--dry-run"], "agentq: error: --vacuum and --dry-run cannot be combined"),
        (["--db", "sqlite:///nowhere.db"], "agentq: error: no database at nowhere.db"),
    ],
)
def test_bad_input_is_an_error_without_a_traceback(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    url = _ledger(tmp_path / "e.db", [1])
    if "--db" not in argv:
        argv = ["--db", url, *argv]
    status, _, err = run(capsys, *argv)
    assert status == 2 and err.startswith(message) and "Traceback" not in err, err
    assert not (tmp_path / "nowhere.db").exists()


def test_a_bad_retention_in_the_config_file_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agentq.toml").write_text('[agentq]\nretention = 0\n')
    status, _, err = run(capsys)
    assert status == 2 and err.startswith("agentq: error: config file agentq.toml")
    assert "retention" in err and "must be more than 0" in err


def test_vacuum_converts_a_database_made_without_auto_vacuum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE app (x)")  # a file made before agentq set auto-vacuum
    conn.close()
    url = _ledger(path, [10])
    status, out, _ = run(capsys, "--db", url, "--vacuum")
    assert status == 0 and out.startswith("deleted 1 task(s)")
    assert "(auto_vacuum: none -> incremental)" in out
    status, out, _ = run(capsys, "--db", url, "--vacuum", "--json")
    assert json.loads(out)["vacuum"]["auto_vacuum"] == "incremental"


def test_the_counts_of_every_kind_are_printed_and_in_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'k.db'}"
    clock = FakeClock(datetime.now(UTC) - timedelta(days=10))
    with Runtime(url, tools=[job], clock=clock, args_inline_bytes=0) as rt:
        rt.submit("job", {"n": 1}, dedupe_key="d1")
        rt.worker().drain()
    status, out, _ = run(capsys, "--db", url, "--dry-run", "--json")
    pruned = json.loads(out)["pruned"]
    assert status == 0 and pruned["dry_run"] is True
    kinds = ("tasks", "payloads", "dedupe_keys", "key_slots", "worker_records")
    assert [pruned[k] for k in kinds] == [1, 1, 1, 0, 0]
    status, out, _ = run(capsys, "--db", url)
    assert status == 0 and out.startswith("deleted 1 task(s)")
    assert "1 out-of-band argument(s), 1 dedupe key(s), 0 key slot record(s)" in out
    assert "0 worker record(s)" in out
    with Runtime(url) as rt:
        assert rt.tasks() == [] and rt.backend.list_records("dedupe") == []


def test_older_than_below_an_hour_asks_for_yes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 27, item 14: `--older-than 0s` deleted every finished task at once.
    monkeypatch.chdir(tmp_path)
    url = _ledger(tmp_path / "y.db", [0.01, 0.01])  # finished ~15 minutes ago
    status, out, err = run(capsys, "--db", url, "--older-than", "0s")
    assert status == 2
    assert err.startswith("agentq: error: --older-than 0s would delete 2 task(s)")
    assert "--yes" in err and "Traceback" not in err
    status, out, _ = run(capsys, "--db", url, "--older-than", "0s", "--dry-run")
    assert status == 0 and out.startswith("would delete 2 task(s)")
    status, out, _ = run(capsys, "--db", url, "--older-than", "1m", "--yes")
    assert status == 0 and out.startswith("deleted 2 task(s)")
    # Nothing left to delete: no question asked.
    status, out, _ = run(capsys, "--db", url, "--older-than", "0s")
    assert status == 0 and out.startswith("deleted 0 task(s)")


def test_the_config_files_audit_retention_keeps_audit_entries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    clock = FakeClock(datetime.now(UTC) - timedelta(days=20))  # real time: the CLI's clock
    with Runtime(url, tools=[job], clock=clock) as rt:
        task = rt.enqueue_action("job", {"n": 1})
        rt.cancel(task.task_id)  # one audit entry
        assert len(rt.audit_log()) == 1
    (tmp_path / "agentq.toml").write_text('[agentq]\naudit_retention = "30d"\n')
    status, out, _ = run(capsys, "--db", url, "--older-than", "1d")
    assert status == 0 and out.startswith("deleted 1 task(s), 0 approval(s), 0 idempotency "
                                          "key(s), 0 audit entry(ies)")  # fmt: skip
    (tmp_path / "agentq.toml").write_text('[agentq]\naudit_retention = "10d"\n')
    status, out, _ = run(capsys, "--db", url, "--older-than", "1d")
    assert status == 0 and "1 audit entry(ies)" in out, out


def test_older_than_below_the_retention_asks_for_yes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 27, item 14: `--older-than 2d` on a 7-day retention deleted, unasked,
    # what the retention setting keeps.
    monkeypatch.chdir(tmp_path)
    url = _ledger(tmp_path / "r.db", [10, 5, 4, 1])
    status, out, err = run(capsys, "--db", url, "--older-than", "2d")
    assert status == 2, out
    assert err.startswith("agentq: error: --older-than 2d would delete 3 task(s)")
    assert "2 more than the retention (7d) allows" in err
    assert "--yes" in err and "Traceback" not in err and out == ""
    with Runtime(url) as rt:
        assert len(rt.tasks()) == 4  # nothing was deleted
    # What the retention deletes anyway is no question: an --older-than above it.
    status, out, _ = run(capsys, "--db", url, "--older-than", "30d")
    assert status == 0 and out.startswith("deleted 0 task(s)")
    status, out, _ = run(capsys, "--db", url, "--older-than", "7d")
    assert status == 0 and out.startswith("deleted 1 task(s)")
    status, out, _ = run(capsys, "--db", url, "--older-than", "2d", "--dry-run")
    assert status == 0 and out.startswith("would delete 2 task(s)")
    status, out, _ = run(capsys, "--db", url, "--older-than", "2d", "--yes")
    assert status == 0 and out.startswith("deleted 2 task(s)")
    # A tool whose retention is off keeps everything: any --older-than asks.
    (tmp_path / "agentq.toml").write_text('[agentq]\nretention = "off"\n')
    status, out, err = run(capsys, "--db", url, "--older-than", "30d")
    assert status == 0 and out.startswith("deleted 0 task(s)")  # nothing that old
    status, out, err = run(capsys, "--db", url, "--older-than", "12h")
    assert status == 2 and "1 more than the retention (off) allows" in err


def test_a_configured_retention_below_an_hour_asks_for_yes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40 item 12: ``--config F`` with ``retention = audit_retention = "1s"``
    erased, unasked, the audit of a decision made seconds ago, where
    ``--older-than 1s`` asks."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    clock = FakeClock(datetime.now(UTC) - timedelta(seconds=5))  # real time: the CLI's clock
    with Runtime(url, tools=[job], clock=clock) as rt:
        task = rt.enqueue_action("job", {"n": 1})
        rt.cancel(task.task_id)  # one audit entry, seconds old
    config = tmp_path / "elsewhere" / "short.toml"
    config.parent.mkdir()
    config.write_text('[agentq]\nretention = "1s"\naudit_retention = "1s"\n')
    status, out, err = run(capsys, "--config", str(config), "--db", url)
    assert status == 2, out
    assert err.startswith("agentq: error: the configured retention (1s) would delete 1 task(s)")
    assert "--yes" in err and "Traceback" not in err
    with Runtime(url) as rt:
        assert len(rt.audit_log()) == 1 and len(rt.tasks()) == 1
    status, out, _ = run(capsys, "--config", str(config), "--db", url, "--dry-run")
    assert status == 0 and out.startswith("would delete 1 task(s)")
    status, out, _ = run(capsys, "--config", str(config), "--db", url, "--yes")
    assert status == 0 and out.startswith("deleted 1 task(s)") and "1 audit entry(ies)" in out
    # Nothing left to delete: no question asked.
    status, out, _ = run(capsys, "--config", str(config), "--db", url)
    assert status == 0 and out.startswith("deleted 0 task(s)")
