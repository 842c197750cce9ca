"""Approval routes: list, read (with its ``ETag``), approve and reject.

``POST /v1/approvals/{id}:approve`` (or ``:reject``) needs ``If-Match`` with
the approval's ``ETag`` as read: if the approval changed since (escalated,
decided, voided) the answer is 412 and nothing is decided, so a stale screen
cannot approve what it no longer shows; so it is for a well-formed entity tag
that is not the approval's (RFC 9110). Without ``If-Match`` the answer is 428,
with a header that is no list of entity tags (or ``*``) 400.
An approve may carry ``args``, the approver's edit of the call (422 if it does
not fit the tool's schema; 403 if the edited call falls under an approval rule
whose approvers do not include the principal).
The decision records the authenticated principal's name, never one from the
request.

Reading needs ``read`` (the approvals of the principal's own tasks), ``approve``
(those it may decide) or ``operate`` (all); others are 404
(:mod:`agentq.server.access`), and so is deciding one: an approval the
principal may not see answers exactly as one that does not exist, whatever
``If-Match`` names, so ids cannot be probed.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentq.approvals import ApprovalInfo, ApprovalStatus
from agentq.server import access
from agentq.server.auth import Principal, Scope, require, require_any
from agentq.server.openapi import ApprovalDecision
from agentq.server.problems import Problem, field_errors
from agentq.server.state import read_json, server_state

__all__ = ["etag", "routes"]

_MAX_ID = 200
# RFC 9110 section 8.8.3: entity-tag = [ W/ ] DQUOTE *etagc DQUOTE, in a list.
_TAG = r'(?:W/)?"[\x21\x23-\x7e\x80-\xff]*"'
# Empty list elements are ignored (section 5.6.1.2); at least one tag is needed.
_TAG_LIST = re.compile(rf"[\s,]*{_TAG}(?:\s*,[\s,]*{_TAG})*[\s,]*")
_STRONG = re.compile(r'(W/)?"([^"]*)"')
_VERSION = re.compile(r"[0-9a-f]{32}")


def etag(approval: ApprovalInfo) -> str:
    """The approval's ETag header value (a strong entity tag of its version)."""
    return f'"{approval.version}"'


def _if_match(header: str | None) -> list[str]:
    """The approval versions ``If-Match`` names: its strong entity tags of an
    approval's form. A well-formed tag that cannot match (weak: If-Match compares
    strongly; not a version) is simply none of them, so the answer is 412, as
    RFC 9110 has it; 400 is for a header that is no list of entity tags, and for
    ``*``, which says nothing of the version the decider saw."""
    if header is None:
        raise Problem(428, "If-Match required",
                      "send If-Match with the approval's ETag (GET /v1/approvals/{id})",
                      errors=[{"header": "If-Match", "detail": "missing"}])  # fmt: skip
    if header.strip() == "*":
        raise Problem(400, "If-Match is not an approval's ETag",
                      "send the approval's ETag: '*' does not say which version you saw",
                      errors=[{"header": "If-Match", "detail": "'*'"}])  # fmt: skip
    if _TAG_LIST.fullmatch(header) is None:
        raise Problem(400, "If-Match is malformed",
                      "If-Match takes entity tags (RFC 9110): the approval's ETag, quoted",
                      errors=[{"header": "If-Match",
                               "detail": "not a list of entity tags"}])  # fmt: skip
    return [tag for weak, tag in _STRONG.findall(header) if not weak and _VERSION.fullmatch(tag)]


def _version_to_decide(
    rt: Any, principal: Principal, approval_id: str, versions: list[str]
) -> str:
    """The version a decision is conditional on: the named one that is current
    (the runtime then refuses it if it changed meanwhile); 412 if none is.

    An approval ``principal`` may not see is a 404 first, as one that does not
    exist, whatever ``If-Match`` says: else its 412 (or the runtime's 403 for a
    non-approver) would tell an id that exists from one that does not."""
    current = access.approval_for(rt, principal, approval_id).version
    if len(versions) == 1:
        return versions[0]
    if current in versions:
        return str(current)
    raise Problem(412, "Approval changed",
                  "If-Match names no current version of this approval: read it again",
                  errors=[{"header": "If-Match", "detail": "does not match"}])  # fmt: skip


def _approval_id(request: Request) -> str:
    approval_id: str = request.path_params["approval_id"]
    if len(approval_id) > _MAX_ID:
        raise Problem(404, "Approval not found", "no such approval")
    return approval_id


def _approval_json(approval: ApprovalInfo) -> dict[str, Any]:
    return approval.model_dump(mode="json")


async def list_approvals(request: Request) -> Response:
    state = server_state(request)
    principal = require_any(request, Scope.READ, Scope.APPROVE)
    status = request.query_params.get("status")
    if status is not None and status not in {s.value for s in ApprovalStatus}:
        known = [s.value for s in ApprovalStatus]
        raise Problem(400, "Invalid status", f"status must be one of {known}",
                      errors=[{"parameter": "status", "detail": "unknown status"}])  # fmt: skip
    found = await run_in_threadpool(
        lambda: access.visible_approvals(state.runtime, principal, state.runtime.approvals(status))
    )
    return JSONResponse({"approvals": [_approval_json(a) for a in found]})


async def get_approval(request: Request) -> Response:
    state = server_state(request)
    principal = require_any(request, Scope.READ, Scope.APPROVE)
    approval = await run_in_threadpool(
        access.approval_for, state.runtime, principal, _approval_id(request)
    )
    return JSONResponse(_approval_json(approval), headers={"ETag": etag(approval)})


async def _decide(request: Request, verb: str) -> Response:
    state = server_state(request)
    principal = require(request, Scope.APPROVE)
    approval_id = _approval_id(request)
    versions = _if_match(request.headers.get("if-match"))
    body = await read_json(request, optional=True)
    try:
        decision = ApprovalDecision.model_validate(body)
    except ValidationError as exc:
        raise Problem(422, "Invalid request", "the body does not fit",
                      errors=field_errors(exc)) from exc  # fmt: skip
    rt = state.runtime
    version = await run_in_threadpool(_version_to_decide, rt, principal, approval_id, versions)
    if verb == "approve":
        task = await run_in_threadpool(
            lambda: rt.approve(
                approval_id, principal.name, decision.note, if_version=version, args=decision.args
            )
        )
    elif decision.args is not None:
        raise Problem(422, "Invalid request", "only an approval may edit the arguments",
                      errors=[{"pointer": "/args", "detail": "not on :reject"}])  # fmt: skip
    else:
        task = await run_in_threadpool(
            lambda: rt.reject(approval_id, principal.name, decision.note, if_version=version)
        )
    return JSONResponse(task.model_dump(mode="json"))


async def approve(request: Request) -> Response:
    return await _decide(request, "approve")


async def reject(request: Request) -> Response:
    return await _decide(request, "reject")


def routes() -> list[Route]:
    return [
        Route("/v1/approvals", list_approvals, methods=["GET"]),
        Route("/v1/approvals/{approval_id}:approve", approve, methods=["POST"]),
        Route("/v1/approvals/{approval_id}:reject", reject, methods=["POST"]),
        Route("/v1/approvals/{approval_id}", get_approval, methods=["GET"]),
    ]
