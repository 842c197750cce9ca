"""``agentq.toml``: a deployment's defaults for the CLI.

::

    [agentq]
    db = "sqlite:///var/agentq.db"
    tools = "tools"
    policies = "policies"

    [settings]              # handed to tool handlers
    payments_url = "https://payments.example.com"

Paths are relative to the file. Command-line flags win over the file; the
``AGENTQ_DB`` environment variable wins over the file's ``db``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from agentq.errors import ConfigError
from agentq.tomlfiles import read_toml, validation_problems

__all__ = ["Config", "load_config"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    db: str | None = None
    tools: str | None = None
    policies: str | None = None


class Config(BaseModel):
    """The validated contents of ``agentq.toml``."""

    model_config = ConfigDict(extra="forbid")

    agentq: _Section = _Section()
    settings: dict[str, Any] = {}


def load_config(path: str | Path = "agentq.toml") -> Config:
    """Read ``agentq.toml`` if it exists (an absent file is an empty config).

    Any problem is a :class:`ConfigError` naming the file, the field and the value.
    """
    file = Path(path)
    if not file.exists():
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
    return config
