"""``agentq.toml``: a deployment's defaults for the CLI.

::

    [agentq]
    db = "sqlite:///var/agentq.db"
    tools = "tools"
    policies = "policies"
    retention = "7d"        # finished tasks are deleted after this ("off": kept)
    audit_retention = "90d" # audit entries are kept at least this long
    args_inline_bytes = 4096  # larger task arguments are stored out of band

    [settings]              # handed to tool handlers
    payments_url = "https://payments.example.com"

    [servers]               # agentq serve, ui, mcp --transport http, worker --metrics-port
    header_timeout = 10     # seconds to send a request's line and headers
    max_waits_per_principal = 100

Every path is relative to the file: ``tools``, ``policies`` and the path of a
``sqlite:///`` URL in ``db``. Command-line flags win over the file; the
``AGENTQ_DB`` environment variable wins over the file's ``db``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentq.errors import ConfigError
from agentq.policies import parse_duration
from agentq.retention import RetentionValue, parse_retention
from agentq.tomlfiles import read_toml, validation_problems

__all__ = ["CONFIG_FILE", "Config", "ServerLimits", "load_config", "load_given_config"]

#: The config file read from the working directory when ``--config`` is not given.
CONFIG_FILE = "agentq.toml"


class _Section(BaseModel):
    """Where the deployment's database, tools and policies are."""

    # Attribute docstrings are the field descriptions docs/reference/config.md is
    # generated from (python -m agentq.reference, agentq.attribute_docs).
    model_config = ConfigDict(extra="forbid")

    db: str | None = None
    """Database URL (``sqlite:///agentq.db``, ``spanner://projects/P/instances/I/databases/D``);
    ``--db`` and ``AGENTQ_DB`` win over it."""
    tools: str | None = None
    """The tools folder, relative to this file; ``--tools`` wins over it."""
    policies: str | None = None
    """The policies folder (or one TOML file), relative to this file; ``--policies``
    wins over it."""
    args_inline_bytes: int = Field(default=4096, ge=0, le=64 * 1024)
    """Task arguments whose JSON is larger than this many bytes are stored out of
    band, in a record of their own deleted with the task when retention prunes it
    (default 4096, the message size Spanner's queue documents recommend)."""
    retention: RetentionValue | None = None
    """How long finished tasks are kept before workers delete them (``"7d"``,
    ``"36h"``; ``"off"``: kept forever); a tool's policy ``retention`` wins over
    it. Unset: 7 days."""

    audit_retention: timedelta | None = None
    """How long audit entries (who approved, cancelled, resolved what) are kept at
    least, even after their task is deleted, whatever ``retention`` or
    ``agentq prune --older-than`` say. Unset: 90 days."""

    @field_validator("audit_retention", mode="before")
    @classmethod
    def _audit_retention(cls, v: object) -> timedelta | None:
        if v is None:
            return None
        keep = parse_duration(v)
        if keep <= timedelta(0):
            raise ValueError("must be more than 0")
        return keep

    @field_validator("retention", mode="before")
    @classmethod
    def _retention(cls, v: object) -> RetentionValue | None:
        return None if v is None else parse_retention(v, parse_duration)


class ServerLimits(BaseModel):
    """What the HTTP servers (``agentq serve``, ``agentq ui``, ``agentq mcp
    --transport http``, ``agentq worker --metrics-port``) allow a client: slow or
    idle clients are cut off, and no principal parks more than its share of
    waits (see docs/explanations/security.md, "The servers' limits")."""

    model_config = ConfigDict(extra="forbid")

    header_timeout: float = Field(default=10.0, ge=0.5, le=300)
    """Seconds a client has to send a request's line and headers, counted from
    the connection (or the end of the previous answer); then it is closed (a
    408 if it sent part of them). uvicorn alone waits for ever."""
    body_timeout: float = Field(default=30.0, ge=0.5, le=3600)
    """Seconds a client has to send a request's whole body, counted from the end
    of its headers; then 408 and the connection is closed."""
    keep_alive_timeout: float = Field(default=5.0, ge=0.5, le=300)
    """Seconds an idle keep-alive connection is kept open between requests."""
    max_connections: int = Field(default=1000, ge=1, le=100_000)
    """Connections (and requests in progress) one server takes at once; beyond,
    a request is answered 503. The worker's metrics port holds at most this many
    idle connections, too."""
    max_waits_per_principal: int = Field(default=100, ge=1, le=100_000)
    """``Prefer: wait`` long-polls and event streams one principal may have open
    at once on one server; one more is answered 429 with ``Retry-After``. On
    ``agentq mcp --transport http``: its waits (``agentq_wait_task``,
    ``agentq_get_run`` with ``wait_seconds``, ``tasks/result``); one more is a
    tool error."""
    mcp_sessions_per_principal: int = Field(default=100, ge=1, le=10_000)
    """``agentq mcp --transport http``: MCP sessions one principal may hold at
    once; one more ``initialize`` is answered 429 with ``Retry-After``. (The MCP
    SDK's 10,000 sessions are one pool: one token could fill it.)"""
    mcp_session_idle_timeout: float = Field(default=300.0, ge=1, le=86_400)
    """``agentq mcp --transport http``: seconds an MCP session may go without a
    request in flight before it ends (its id then answers 404, and the client
    starts a new one); it stops counting against its principal's sessions then.
    The MCP SDK's default is 30 minutes."""
    shutdown_grace: float = Field(default=5.0, ge=0, le=600)
    """Seconds a stopping server (SIGTERM, Ctrl-C) gives the requests in progress
    to finish before it cuts them off. ``agentq serve`` answers its parked
    ``Prefer: wait`` long-polls at once (the task as it is) and ends its event
    streams; uvicorn alone waited for every one (a long-poll of ``--max-wait``
    seconds held the stopping server that long)."""
    metrics_threads: int = Field(default=4, ge=1, le=64)
    """Threads that answer the worker's metrics port: a connection holds one only
    while it sends a request (idle connections wait in a selector)."""


class Config(BaseModel):
    """The validated contents of ``agentq.toml``."""

    model_config = ConfigDict(extra="forbid")

    agentq: _Section = _Section()
    """The database, tools and policies."""
    servers: ServerLimits = ServerLimits()
    """The HTTP servers' limits against slow, idle and numerous clients."""
    settings: dict[str, Any] = {}
    """Any keys, handed to tool handlers as ``ctx.settings`` (API base
    URLs and the like); ``--setting KEY=VALUE`` wins over them."""


def load_config(path: str | Path = "agentq.toml", *, required: bool = False) -> Config:
    """Read ``agentq.toml`` if it exists (an absent file is an empty config,
    or with ``required`` a :class:`ConfigError`).

    Any problem is a :class:`ConfigError` naming the file, the field and the value.
    """
    file = Path(path)
    if not file.exists():
        if required:
            raise ConfigError(f"config file {file} does not exist")
        return Config()
    where = f"config file {file}"
    try:
        config = Config.model_validate(read_toml(file, "config file"))
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, lambda loc: (where, loc), Config)) from exc
    base = file.resolve().parent
    section = config.agentq
    for name in ("tools", "policies"):
        value = getattr(section, name)
        if value is not None and not Path(value).is_absolute():
            setattr(section, name, str(base / value))
    if section.db is not None:
        section.db = _sqlite_relative_to(section.db, base)
    return config


def load_given_config(given: str | Path | None) -> Config:
    """The config a command uses: ``given`` (``--config``, which must exist), else
    ``./agentq.toml`` if there is one, else the defaults."""
    if given is not None:
        return load_config(given, required=True)
    return load_config(CONFIG_FILE)


def _sqlite_relative_to(url: str, base: Path) -> str:
    """``sqlite:///relative.db`` read from a file in ``base``: the path from ``base``."""
    scheme, sep, rest = url.partition(":///")
    if scheme.lower() != "sqlite" or not sep or rest.startswith("/") or rest.startswith(":memory:"):
        return url
    return f"sqlite:///{base / rest}"
