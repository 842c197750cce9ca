"""Issue 28 item 12, on the command line: ``agentq tasks`` and ``agentq
approvals`` list newest first, ``--oldest-first`` reverses, ``--status all``
lists every status, and both page with ``--limit`` / ``--after``. Before,
both listed oldest first (the newest needed every page), ``approvals`` had no
paging and read every approval, and ``--status all`` was refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ._project import agentq, make_project

pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path: Path) -> Path:
    make_project(tmp_path)
    assert agentq("init", cwd=tmp_path).returncode == 0
    return tmp_path


def _json(*args: str, cwd: Path) -> Any:
    done = agentq(*args, "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _calls(tasks: list[dict[str, Any]]) -> list[str]:
    """The ids of the callers' tasks (not the approvals' notifications)."""
    return [t["task_id"] for t in tasks if t["kind"] == "action"]


def test_tasks_and_approvals_list_newest_first_and_page(project: Path) -> None:
    made = [_json("enqueue", "flaky", "--args", json.dumps({"name": f"t{i}"}), cwd=project)
            for i in range(3)]  # fmt: skip
    asked = [_json("enqueue", "payout", "--args", json.dumps({"amount": 500 + i}), cwd=project)
             for i in range(3)]  # fmt: skip
    ids = [t["task_id"] for t in made + asked]

    assert _calls(_json("tasks", cwd=project)["tasks"]) == ids[::-1]
    oldest = _json("tasks", "--oldest-first", "--status", "all", cwd=project)["tasks"]
    assert _calls(oldest) == ids
    first = _json("tasks", "--limit", "5", cwd=project)
    rest = _json("tasks", "--limit", "5", "--after", first["next_after"], cwd=project)
    assert _calls(first["tasks"] + rest["tasks"]) == ids[::-1]
    assert len(first["tasks"]) == 5 and rest["next_after"] is None

    approvals = [t["approval_id"] for t in asked]
    inbox = _json("approvals", cwd=project)
    assert [a["approval_id"] for a in inbox["approvals"]] == approvals[::-1]
    page = _json("approvals", "--limit", "2", "--oldest-first", cwd=project)
    assert [a["approval_id"] for a in page["approvals"]] == approvals[:2]
    more = _json("approvals", "--limit", "2", "--oldest-first", "--after", page["next_after"],
                 cwd=project)  # fmt: skip
    assert [a["approval_id"] for a in more["approvals"]] == approvals[2:]
    assert more["next_after"] is None

    decided = agentq("reject", approvals[0], "--by", "carol", cwd=project)
    assert decided.returncode == 0, decided.stderr
    assert len(_json("approvals", cwd=project)["approvals"]) == 2  # open only, by default
    everything = _json("approvals", "--status", "all", cwd=project)["approvals"]
    assert [a["approval_id"] for a in everything] == approvals[::-1]
