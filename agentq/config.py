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

__all__ = ["Config", "load_config"]


class _Section(BaseModel):
    """Where the deployment's database, tools and policies are."""

    # Attribute docstrings are the field descriptions docs/reference/config.md is
    # generated from (python -m agentq.reference).
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

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


class Config(BaseModel):
    """The validated contents of ``agentq.toml``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    agentq: _Section = _Section()
    """The database, tools and policies."""
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
        raise ConfigError(validation_problems(exc, lambda loc: (where, loc))) from exc
    base = file.resolve().parent
    section = config.agentq
    for name in ("tools", "policies"):
        value = getattr(section, name)
        if value is not None and not Path(value).is_absolute():
            setattr(section, name, str(base / value))
    if section.db is not None:
        section.db = _sqlite_relative_to(section.db, base)
    return config


def _sqlite_relative_to(url: str, base: Path) -> str:
    """``sqlite:///relative.db`` read from a file in ``base``: the path from ``base``."""
    scheme, sep, rest = url.partition(":///")
    if scheme.lower() != "sqlite" or not sep or rest.startswith("/") or rest.startswith(":memory:"):
        return url
    return f"sqlite:///{base / rest}"
