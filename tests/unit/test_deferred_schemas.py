"""The pydantic models a worker never validates have their schemas built on
first use, not when agentq is imported (issue 38 item 3: a worker's start-up).

Building a model's validator is most of what defining it costs: 23 models took
about 40 % of ``import agentq.runtime``'s CPU, and a worker process that drains
its queues uses 8 of them (the configuration, the policy, its tools' arguments).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentq.approvals import ApprovalInfo
from agentq.ledger import TaskInfo

DEFERRED = (
    "agentq.ledger.TaskInfo",
    "agentq.approvals.ApprovalInfo",
    "agentq.approvals.ApprovalNotice",
    "agentq.run_info.RunInfo",
    "agentq.run_info.TurnInfo",
    "agentq.run_info.CallInfo",
    "agentq.run_info.Usage",
    "agentq.lifecycle.audit.AuditEntry",
    "agentq.envelope.TaskEnvelope",
    "agentq.agents.agent.TurnArgs",
    "agentq.lifecycle.heartbeats.WorkerDown",
    "agentq.catalog._RecordedArgs",
)

_WORKER = """
import importlib, sys
from agentq import Runtime
rt = Runtime(sys.argv[1])
rt.worker().drain()
rt.close()
built = []
for name in sys.argv[2:]:
    module, _, model = name.rpartition(".")
    if getattr(importlib.import_module(module), model).__dict__.get("__pydantic_complete__"):
        built.append(name)
print(" ".join(built))
"""


def test_a_worker_builds_none_of_the_models_it_never_validates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, url, *DEFERRED],
        capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.stdout.split() == []


def test_a_deferred_model_validates_and_describes_itself_when_asked() -> None:
    info = TaskInfo.model_validate(
        {"task_id": "tsk_1", "tool": "t", "status": "queued", "attempt": 1,
         "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00"}
    )  # fmt: skip
    assert info.task_id == "tsk_1" and info.status == "queued"
    assert "approval_id" in ApprovalInfo.model_json_schema()["properties"]
