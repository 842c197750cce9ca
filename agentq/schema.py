"""The DDL a Spanner database needs for a project's tools, without opening it.

``agentq init --print-ddl`` for a ``spanner://`` URL: printing DDL needs no
credentials, no network and not even the ``spanner`` extra (DDL generation is
plain Python in :mod:`agentq.backends.spanner.ddl`).
"""

from __future__ import annotations

from pathlib import Path

from agentq.backends.spanner.config import parse_url
from agentq.backends.spanner.ddl import ddl
from agentq.envelope import task_queue_spec
from agentq.lifecycle.heartbeats import heartbeat_queue_spec
from agentq.lifecycle.tasks import ESCALATION_QUEUE
from agentq.tools import ToolRegistry

__all__ = ["spanner_ddl"]


def spanner_ddl(url: str, tools: str | Path) -> list[str]:
    """The statements ``agentq init`` would apply to the database of ``url``."""
    config = parse_url(url)
    registry = ToolRegistry()
    registry.load_dir(tools)
    specs = [task_queue_spec(q) for q in sorted(registry.queues() | {ESCALATION_QUEUE})]
    specs.append(heartbeat_queue_spec())
    return ddl(specs, postgres=config.postgres)
