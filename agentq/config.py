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

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from agentq.errors import ConfigError

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
    """Read ``agentq.toml`` if it exists (an absent file is an empty config)."""
    file = Path(path)
    if not file.exists():
        return Config()
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
        config = Config.model_validate(data)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{file}: {exc}") from exc
    except ValidationError as exc:
        raise ConfigError(f"invalid {file}:\n{exc}") from exc
    base = file.resolve().parent
    section = config.agentq
    for name in ("tools", "policies"):
        value = getattr(section, name)
        if value is not None and not Path(value).is_absolute():
            setattr(section, name, str(base / value))
    return config
