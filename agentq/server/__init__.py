"""agentq's HTTP API (``pip install 'agentq-runtime[http]'``; ``agentq serve``).

Routes (all JSON; errors ``application/problem+json`` naming the field):

* ``POST /v1/tools/{tool}/actions`` — enqueue (``Idempotency-Key``; :mod:`.actions`)
* ``GET /v1/tasks/{id}`` (``Prefer: wait=N``), ``GET /v1/tasks/{id}/events`` (SSE),
  ``GET /v1/tasks?status=&tool=``, ``POST /v1/tasks/{id}:cancel`` (:mod:`.tasks`)
* ``GET /v1/approvals?status=pending``, ``GET /v1/approvals/{id}`` (``ETag``),
  ``POST /v1/approvals/{id}:approve|reject`` (``If-Match``; :mod:`.approvals`)
* ``POST /v1/runs`` (``Idempotency-Key``), ``GET /v1/runs/{id}`` (``Prefer: wait=N``),
  ``GET /v1/runs/{id}/events`` (SSE), ``GET /v1/runs?status=&agent=``,
  ``POST /v1/runs/{id}:cancel``, ``POST /v1/runs/{id}/messages``: durable agent
  runs (:mod:`.runs`)
* ``GET /openapi.json`` — generated from the tools' models (:mod:`.openapi`)

Authentication and scopes: :mod:`.auth`. Building the app and mounting other
surfaces into it: :mod:`.app`. Every state change goes through the
:class:`~agentq.runtime.Runtime` facade.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "InsecureLocal",
    "Principal",
    "Problem",
    "Scope",
    "ServerState",
    "TokenAuth",
    "create_app",
    "require",
    "server_state",
]

# Imported on first use, so `agentq.server.cli` (loaded by every `agentq` command)
# does not need Starlette: only serving does.
_HOMES = {
    "ServerState": "app", "create_app": "app", "server_state": "app",
    "InsecureLocal": "auth", "Principal": "auth", "Scope": "auth", "TokenAuth": "auth",
    "require": "auth", "Problem": "problems",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agentq.server' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentq.server.{home}"), name)
