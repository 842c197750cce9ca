"""``docs/reference/http.md`` and ``docs/reference/openapi.json``: every route
of the HTTP API, from the OpenAPI document ``agentq serve`` serves for the
refund bot.
"""

from __future__ import annotations

import json
from typing import Any

from agentq.reference.markdown import NOTICE, table_cell

__all__ = ["render_http", "render_openapi"]


def _openapi() -> dict[str, Any]:
    """The document ``agentq serve`` serves for the refund bot (``agentq openapi``)."""
    from agentq.demo.project import demo_project
    from agentq.runtime import Runtime
    from agentq.server.auth import InsecureLocal
    from agentq.server.state import ServerState

    project = demo_project()
    rt = Runtime("sqlite:///:memory:", tools=project.tools, policies=project.policies)
    try:
        return ServerState(rt, InsecureLocal()).openapi()
    finally:
        rt.close()


def render_openapi() -> str:
    """``docs/reference/openapi.json``."""
    return json.dumps(_openapi(), indent=2) + "\n"


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_schema_type(s) for s in schema[key])
    if schema.get("type") == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " or ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    return str(schema.get("type", "any"))


def render_http() -> str:
    """``docs/reference/http.md``, from the served OpenAPI document."""
    document = _openapi()
    lines = [NOTICE.format(source="the OpenAPI document `agentq serve` serves"), "",
             "# HTTP API", "",
             "Every route of `agentq serve`, from the OpenAPI 3.1 document it serves at "
             "`/openapi.json` (and as one HTML page at `/docs`), here for the refund bot's "
             "tools: each tool of a project gets its own `POST /v1/tools/{tool}/actions`, "
             "typed by its arguments' model. The document itself: "
             "[openapi.json](openapi.json); `agentq openapi` prints yours offline. The "
             "[HTTP API guide](../how-to/http-api.md) shows the API at work.", ""]  # fmt: skip
    for path, methods in document["paths"].items():
        for method, op in methods.items():
            lines += [f"## `{method.upper()} {path}`", ""]
            for key in ("summary", "description"):
                if op.get(key):
                    lines += [table_cell(op[key]), ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | required | type | meaning |",
                          "| --- | --- | --- | --- | --- |"]  # fmt: skip
                for p in params:
                    needed = "yes" if p.get("required") else "no"
                    lines.append(f"| `{p['name']}` | {p['in']} | {needed}"
                                 f" | {table_cell(_schema_type(p.get('schema', {})))}"
                                 f" | {table_cell(p.get('description', ''))} |")  # fmt: skip
                lines.append("")
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                lines += [f"Body ({media}): {_schema_type(content.get('schema', {}))}", ""]
            lines += ["| status | meaning |", "| --- | --- |"]
            for status, response in op.get("responses", {}).items():
                lines.append(f"| {status} | {table_cell(response.get('description', ''))} |")
            lines.append("")
    lines += ["## Schemas", ""]
    for name, schema in document["components"]["schemas"].items():
        lines += [f"### {name} {{#{name.lower()}}}", ""]
        if schema.get("description"):
            lines += [table_cell(schema["description"]), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            lines += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
            for field, spec in props.items():
                lines.append(f"| `{field}` | {table_cell(_schema_type(spec))} | "
                             f"{'yes' if field in required else 'no'} | "
                             f"{table_cell(spec.get('description', ''))} |")  # fmt: skip
            lines.append("")
        elif "enum" in schema:
            lines += [f"One of {_schema_type(schema)}.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"
