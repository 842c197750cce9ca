"""The DDL a Spanner or PostgreSQL database needs for a project's tools,
without opening it.

``agentq init --print-ddl`` for a ``spanner://`` or ``postgresql://`` URL:
printing DDL needs no credentials, no network and not even the ``spanner`` or
``postgres`` extra (DDL generation is plain Python in
:mod:`agentq.backends.spanner.ddl` and :mod:`agentq.backends.postgres.queues`).
"""

from __future__ import annotations

from pathlib import Path

from agentq.backends.postgres.config import parse_url as parse_postgres_url
from agentq.backends.postgres.queues import ddl_statements
from agentq.backends.spanner.config import parse_url
from agentq.backends.spanner.ddl import ddl
from agentq.queue_set import add_builtin_tools, queue_specs
from agentq.spec import QueueSpec
from agentq.tools import ToolRegistry

__all__ = ["postgres_ddl", "spanner_ddl"]


def _specs(tools: str | Path) -> list[QueueSpec]:
    registry = ToolRegistry()
    registry.load_dir(tools)
    add_builtin_tools(registry)  # as a runtime does: webhooks, agents' turns
    return queue_specs(registry)


def spanner_ddl(url: str, tools: str | Path) -> list[str]:
    """The statements ``agentq init`` would apply to the database of ``url``."""
    config = parse_url(url)
    return ddl(_specs(tools), postgres=config.postgres, namespace=config.namespace)


def postgres_ddl(url: str, tools: str | Path) -> list[str]:
    """The statements that create agentq's schema and the tools' queues in the
    PostgreSQL database of ``url`` (``agentq init`` runs the same when it opens it)."""
    return ddl_statements(parse_postgres_url(url).schema, _specs(tools))
