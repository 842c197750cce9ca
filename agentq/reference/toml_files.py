"""``docs/reference/policies.md`` and ``docs/reference/config.md``: the policy
files and ``agentq.toml``, every key, its type, limits, default and meaning,
from the pydantic models that read them (:class:`agentq.policies.Policy`,
:class:`agentq.config.Config`).
"""

from __future__ import annotations

import types
from datetime import timedelta
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from agentq.attribute_docs import field_docs
from agentq.config import Config
from agentq.policies import MAX_DURATION, Policy, format_duration
from agentq.reference.markdown import NOTICE, markdown_text

__all__ = ["render_config", "render_policies"]


def _type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(_type(a) for a in args if a is not type(None))
    if origin in (tuple, list):
        return f"array of {_type(args[0])}s"
    if origin is Literal:
        return " or ".join(f'`"{a}"`' for a in args)
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "table"
    names = {timedelta: "duration", int: "integer", float: "number", bool: "boolean", str: "string"}
    return names.get(annotation, str(annotation))


def _number(value: Any) -> str:
    number = float(value)
    return f"{int(number):,}" if number.is_integer() else f"{number:g}"


def _limits(info: FieldInfo) -> str:
    parts = []
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge):
            parts.append(f"at least {_number(item.ge)}")
        elif isinstance(item, annotated_types.Le):
            parts.append(f"at most {_number(item.le)}")
    return ", ".join(parts)


def _default(info: FieldInfo) -> str:
    value = info.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, timedelta):
        return f'`"{format_duration(value)}"`'
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple | list):
        return "`[]`" if not value else f"`{list(value)}`"
    return f"`{value}`"


def _section(name: str, annotation: Any) -> tuple[str, type[BaseModel] | None]:
    """The TOML heading of a top-level field, and the model of its keys (if any)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{name}]", annotation
    if origin is dict and isinstance(args[1], type) and issubclass(args[1], BaseModel):
        return f"[{name}.NAME]", args[1]
    if origin in (tuple, list) and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return f"[[{name}]]", args[0]
    return f"[{name}]", None


def _keys(model: type[BaseModel]) -> list[str]:
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    docs = field_docs(model)
    for key, info in model.model_fields.items():
        kind = _type(info.annotation)
        limits = _limits(info)
        kind = f"{kind} ({limits})" if limits else kind
        rows.append(f"| `{key}` | {kind} | {_default(info)} | {markdown_text(docs[key])} |")
    return rows


def _render(title: str, source: str, intro: str, model: type[BaseModel], outro: str) -> str:
    lines = [NOTICE.format(source=source), "", f"# {title}", "", intro.strip(), ""]
    docs = field_docs(model)
    for name, info in model.model_fields.items():
        heading, keys = _section(name, info.annotation)
        lines += [f"## `{heading}`", "", markdown_text(docs[name]), ""]
        if keys is not None:
            lines += [*_keys(keys), ""]
    lines += [outro.strip(), ""]
    return "\n".join(lines)


def render_policies() -> str:
    """``docs/reference/policies.md``."""
    intro = f"""
Policies are TOML files in a folder (`policies/` in a project; `--policies`,
`agentq.toml` or `Runtime(..., policies=...)` choose it). Every `*.toml` file in
the folder is read and merged: a tool configured twice, an unknown section or
key, or a value out of range is an error naming the file and the key. The
executor enforces the policy; an agent's arguments cannot change it.

Durations are written `"250ms"`, `"10s"`, `"30m"`, `"72h"`, `"2d"` or as a
number of seconds, at most {MAX_DURATION.days}d.
"""
    outro = """
## Example

The refund bot's policy, `policies/refunds.toml` (`agentq new` writes it into a new project):

```toml
[defaults]
max_attempts = 5
escalate_after = "72h"
notify_tool = "request_approval"   # announces approval requests, if this tool exists
escalation_tool = "escalate"       # runs when an approval waits too long, if it exists

[tools.execute_refund]
allowed_hosts = ["payments.example.com"]
rate_limit_per_second = 20

[[approvals]]                      # refunds above 100 need a human
tool = "execute_refund"
field = "amount"
above = 100
```
"""
    return _render("Policy file reference", "agentq/policies/", intro, Policy, outro)


def render_config() -> str:
    """``docs/reference/config.md``."""
    intro = """
`agentq.toml` gives the `agentq` command its defaults for a deployment. Every
path in it is relative to the file. Command-line flags win over the file, and
the `AGENTQ_DB` environment variable wins over its `db`. An unknown section or
key is an error naming the file and the key.
"""
    outro = """
## Example

```toml
[agentq]
db = "sqlite:///var/agentq.db"
tools = "tools"
policies = "policies"

[settings]
payments_url = "https://payments.example.com"
notifications_url = "https://notify.example.com"
```
"""
    return _render("`agentq.toml` reference", "agentq/config.py", intro, Config, outro)
