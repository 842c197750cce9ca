"""The ``/docs`` page: the OpenAPI document as one self-contained HTML page.

Rendered on the server from the document (no script, no stylesheet from a CDN,
so it works offline and under a strict Content-Security-Policy): each operation
with its method, path, summary, parameters and statuses, and each request
body's schema. A client generator wants ``/openapi.json`` itself; this page is
for the person reading it.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

__all__ = ["render_docs"]

_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
    "code,pre{font:13px ui-monospace,monospace}pre{background:#f4f4f4;padding:.5rem;"
    "overflow:auto}section{border-top:1px solid #ddd;padding:.5rem 0}"
    ".m{font-weight:bold;text-transform:uppercase;margin-right:.5rem}"
)


def render_docs(spec: dict[str, Any]) -> str:
    """The HTML page of ``spec`` (an OpenAPI 3.1 document)."""
    info = spec.get("info", {})
    title = escape(str(info.get("title", "API")))
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{title}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{title} {escape(str(info.get('version', '')))}"
        f'</h1><p>The machine-readable document: <a href="/openapi.json">/openapi.json</a> '
        "(OpenAPI 3.1). Every operation needs <code>Authorization: Bearer &lt;token&gt;</code>."
        "</p>"
    ]
    for path, operations in spec.get("paths", {}).items():
        for method, op in operations.items():
            parts.append(_operation(path, method, op))
    parts.append("</body></html>")
    return "".join(parts)


def _operation(path: str, method: str, op: dict[str, Any]) -> str:
    anchor = escape(str(op.get("operationId", "")))
    html = [f'<section id="{anchor}"><h2><span class=m>{escape(method)}</span>'
            f"<code>{escape(path)}</code></h2>"]  # fmt: skip
    if op.get("summary"):
        html.append(f"<p>{escape(str(op['summary']))}</p>")
    params = [f"<li><code>{escape(str(p['name']))}</code> ({escape(str(p['in']))}"
              f"{', required' if p.get('required') else ''})</li>"
              for p in op.get("parameters", [])]  # fmt: skip
    if params:
        html.append(f"<p>Parameters:</p><ul>{''.join(params)}</ul>")
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    if "schema" in body:
        html.append(f"<p>Body:</p><pre>{escape(json.dumps(body['schema'], indent=2))}</pre>")
    statuses = ", ".join(escape(str(s)) for s in op.get("responses", {}))
    html.append(f"<p>Answers: {statuses}</p></section>")
    return "".join(html)
