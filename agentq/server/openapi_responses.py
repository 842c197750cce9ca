"""What every operation of the OpenAPI document shares: its JSON bodies and
responses, and the problem details (RFC 9457) each error status answers with.

:mod:`agentq.server.openapi` (the tasks' and approvals' routes) and
:mod:`agentq.server.openapi_runs` (the durable runs' routes) build their
operations from these.
"""

from __future__ import annotations

from typing import Any

__all__ = ["json_body", "json_response", "responses"]

_PROBLEM = {"$ref": "#/components/schemas/Problem"}


def responses(ok: dict[str, Any], *errors: int) -> dict[str, Any]:
    """An operation's responses: ``ok``, and a problem for each of ``errors`` and
    for what any request may meet (401, 403, 429, 503)."""
    out = dict(ok)
    titles = {400: "Bad request", 401: "No or bad token", 403: "Missing scope or refused",
              404: "Not found", 409: "Conflict", 412: "Changed since read",
              413: "Body too large", 415: "Not JSON", 422: "Invalid request",
              428: "Precondition required", 503: "Database unavailable",
              429: "Too many requests (wrong tokens from this address, or open waits of "
                   "this principal): wait Retry-After seconds"}  # fmt: skip
    # 429: any request with a token, while its address is locked out (agentq.server.guessing).
    for status in (401, 403, 429, 503, *errors):
        out[str(status)] = {
            "description": titles[status],
            "content": {"application/problem+json": {"schema": _PROBLEM}},
        }
    return out


def json_response(
    ref: str, description: str, headers: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A response whose JSON body is the component schema ``ref``."""
    out: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }
    if headers:
        out["headers"] = headers
    return out


def json_body(ref: str, *, required: bool = True) -> dict[str, Any]:
    """A request body of the component schema ``ref``."""
    return {
        "required": required,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }
