"""Errors as ``application/problem+json`` (RFC 9457), naming the field.

Every refusal of the HTTP API is a :class:`Problem`: ``status``, ``title``,
``detail`` and, for bad input, ``errors``: a list of ``{"pointer": "/args/amount",
"detail": "..."}`` (JSON Pointers into the request body, or ``"header":
"Idempotency-Key"`` for a header). :func:`problem_for` maps agentq's own
exceptions to their HTTP status once, for every route.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentq.errors import (
    AgentQError,
    ApprovalChanged,
    ApprovalError,
    ApproverNotAllowed,
    BackendUnavailable,
    IdempotencyConflict,
    IllegalTransition,
    InvalidArguments,
    PayloadTooLarge,
    PolicyViolation,
    RunNotFound,
    SelfApprovalRefused,
    TaskNotFound,
    ToolError,
    UnknownTool,
)
from agentq.redact import redact_text

__all__ = [
    "PROBLEM_HANDLERS",
    "PROBLEM_JSON",
    "SELF_APPROVAL_TYPE",
    "Problem",
    "argument_errors",
    "field_errors",
    "problem_for",
    "problem_response",
]

PROBLEM_JSON = "application/problem+json"
#: The problem type of a refused self-approval (the four-eyes rule).
SELF_APPROVAL_TYPE = "urn:agentq:problem:self-approval"


class Problem(HTTPException):
    """An HTTP error answer; raise it from a route, the app renders it.

    A Starlette ``HTTPException``, so an application mounted into the API that
    does not install :data:`PROBLEM_HANDLERS` still answers with its status and
    headers (as plain text); with them, as problem+json."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str = "",
        *,
        errors: Sequence[dict[str, str]] = (),
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(status_code=status, detail=detail or title, headers=headers)
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = list(errors)
        self.headers = headers or {}
        self.extra = extra

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "about:blank", "title": self.title, "status": self.status}
        if self.detail:
            out["detail"] = redact_text(self.detail)
        if self.errors:
            out["errors"] = self.errors
        out.update(self.extra)
        return out


def problem_response(problem: Problem) -> Response:
    return JSONResponse(
        problem.body(), status_code=problem.status, headers=problem.headers,
        media_type=PROBLEM_JSON,
    )  # fmt: skip


def field_errors(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    """Pydantic's errors as JSON Pointers into the request body."""
    out = []
    for err in exc.errors(include_url=False):
        pointer = prefix + "".join(
            "/" + str(p).replace("~", "~0").replace("/", "~1") for p in err["loc"]
        )
        out.append({"pointer": pointer or "/", "detail": str(err["msg"])})
    return out


def argument_errors(exc: InvalidArguments, prefix: str = "/args") -> list[dict[str, str]]:
    """A tool's refusal of its arguments as JSON Pointers, one per bad field
    (``/args/curency``), or one at ``prefix`` when the arguments as a whole are."""
    if not exc.problems:
        return [{"pointer": prefix, "detail": str(exc)}]
    return [
        {"pointer": prefix + "".join(
            "/" + str(p).replace("~", "~0").replace("/", "~1") for p in path
        ), "detail": detail}
        for path, detail in exc.problems
    ]  # fmt: skip


def problem_for(exc: AgentQError) -> Problem:
    """The HTTP answer to one of agentq's errors."""
    text = str(exc)
    if isinstance(exc, TaskNotFound):
        return Problem(404, "Task not found", text)
    if isinstance(exc, RunNotFound):
        return Problem(404, "Run not found", text)
    if isinstance(exc, ApprovalChanged):
        return Problem(412, "Approval changed", text)
    if isinstance(exc, ApprovalError) and text.startswith("no approval"):
        return Problem(404, "Approval not found", text)
    if isinstance(exc, SelfApprovalRefused):
        return Problem(403, "Self-approval refused (four eyes)", text, type=SELF_APPROVAL_TYPE,
                       rule=exc.rule)  # fmt: skip
    if isinstance(exc, ApproverNotAllowed):
        return Problem(403, "Not an approver of this approval", text)
    if isinstance(exc, IllegalTransition):
        return Problem(409, "Not allowed in this state", text)
    if isinstance(exc, IdempotencyConflict):
        return Problem(422, "Idempotency-Key reused with another request", text,
                       errors=[{"header": "Idempotency-Key", "detail": text}])  # fmt: skip
    if isinstance(exc, UnknownTool):
        return Problem(404, "Unknown tool", text)
    if isinstance(exc, InvalidArguments):
        # A tool's refusal of its arguments points at each field (an approval's
        # edited args too); other invalid values say so in the detail.
        return Problem(422, "Invalid request", text,
                       errors=argument_errors(exc) if exc.problems else ())  # fmt: skip
    if isinstance(exc, ToolError | PolicyViolation):
        return Problem(403, "Refused by policy", text)
    if isinstance(exc, PayloadTooLarge):
        # The client's arguments are too big: retrying cannot help (a 500 invites it).
        return Problem(413, "Arguments too large", text)
    if isinstance(exc, BackendUnavailable):
        return Problem(503, "Database unavailable", text, headers={"Retry-After": "1"})
    return Problem(500, "Internal error", type(exc).__name__)


async def handle_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return problem_response(exc)


async def handle_agentq_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AgentQError)
    return problem_response(problem_for(exc))


#: Exception handlers for a Starlette app mounted into the API (the console):
#: ``Starlette(routes=..., exception_handlers=PROBLEM_HANDLERS)``.
PROBLEM_HANDLERS: dict[Any, Any] = {Problem: handle_problem, AgentQError: handle_agentq_error}
