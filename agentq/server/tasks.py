"""Task routes: read (with ``Prefer: wait=N`` long-poll), list, events, cancel.

* ``GET /v1/tasks/{id}`` — the task; with ``Prefer: wait=N`` (RFC 7240) the
  answer waits until the task is final or N seconds (at most the server's
  ``max_wait``) pass, woken by the commit (``Runtime.wait_async``), and says
  ``Preference-Applied: wait=N``.
* ``GET /v1/tasks/{id}/events`` — server-sent events: one ``task`` event with
  the task now and one at each change, ending when it is final.

A principal may have ``max_waits_per_principal`` long-polls and event streams
open at once (``[servers]`` in ``agentq.toml``); one more is 429 with
``Retry-After`` (:class:`~agentq.server.state.WaitSlots`). A waiter is woken
only by commits that wrote its task (:mod:`agentq.waiting`).
* ``GET /v1/tasks?status=&tool=&limit=&after=&order=`` — a page of tasks,
  newest first (``order=oldest``: oldest first); ``next_after`` in the answer
  is the ``after`` of the next page (``null`` after the last). The filters and
  what the principal may see are part of the query: a page reads ``limit + 1``
  tasks however large the ledger.
* ``POST /v1/tasks/{id}:cancel`` — cancel an unfinished task (409 if final).

Each answers only about tasks the principal may see (its own; everyone's with
``operate`` or ``admin``), and never about the runtime's own timers, notices
and webhooks: any other id is 404, as one that does not exist
(:mod:`agentq.server.access`).
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentq.ledger import TaskInfo, TaskStatus
from agentq.server import access
from agentq.server.auth import Principal, Scope, require, require_any
from agentq.server.problems import Problem
from agentq.server.state import Releasing, ServerState, server_state

__all__ = ["ORDERS", "parse_prefer_wait", "routes"]

#: ``order=`` of ``GET /v1/tasks``: ``newest`` first (the default) or ``oldest``.
ORDERS = ("newest", "oldest")

_WAIT = re.compile(r"^\s*wait\s*=\s*\"?(\d{1,6})\"?\s*$", re.IGNORECASE)
_MAX_ID = 200
#: A page cursor is a task id (``next_after`` of the page before).
_CURSOR = re.compile(r"tsk_[!-~]{1,196}")


def parse_prefer_wait(header: str | None) -> int | None:
    """Seconds of a ``wait`` preference in a ``Prefer`` header; others are ignored
    (RFC 7240: a server ignores preferences it does not understand)."""
    if not header:
        return None
    for part in header.split(","):
        token = part.split(";")[0]
        match = _WAIT.match(token)
        if match:
            return int(match.group(1))
    return None


def _task_id(request: Request) -> str:
    task_id: str = request.path_params["task_id"]
    if len(task_id) > _MAX_ID:
        raise Problem(404, "Task not found", "no such task")
    return task_id


async def get_task(request: Request) -> Response:
    state = server_state(request)
    principal = require(request, Scope.READ)
    task_id = _task_id(request)
    wait = parse_prefer_wait(request.headers.get("prefer"))
    headers = {"Vary": "Prefer"}
    task = await run_in_threadpool(access.task_for, state.runtime, principal, task_id)
    if wait and not task.done:
        seconds = min(wait, int(state.max_wait))
        release = state.waits.take(principal.name)  # 429 beyond the principal's share
        try:
            task = await _wait_unless_closing(state, principal, task_id, seconds)
        finally:
            release()
        headers["Preference-Applied"] = f"wait={seconds}"
    elif wait:
        headers["Preference-Applied"] = f"wait={min(wait, int(state.max_wait))}"
    return JSONResponse(task.model_dump(mode="json"), headers=headers)


async def _wait_unless_closing(
    state: ServerState, principal: Principal, task_id: str, seconds: int
) -> TaskInfo:
    """The task once finished or after ``seconds``; as it is now if the server
    starts to stop meanwhile (the client polls again, elsewhere or later: a
    stopping server no longer waits out every long-poll)."""
    waiting = asyncio.ensure_future(state.runtime.wait_async(task_id, seconds))
    closing = asyncio.ensure_future(state.closing.wait())
    try:
        await asyncio.wait({waiting, closing}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        closing.cancel()
        if not waiting.done():
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
    if not waiting.cancelled():
        return waiting.result()
    return await run_in_threadpool(access.task_for, state.runtime, principal, task_id)


async def task_events(request: Request) -> Response:
    state = server_state(request)
    principal = require(request, Scope.READ)
    task_id = _task_id(request)
    # 404 before the stream starts (also for a task the principal may not see).
    await run_in_threadpool(access.task_for, state.runtime, principal, task_id)
    release = state.waits.take(principal.name)  # 429 beyond the principal's share

    async def events() -> AsyncIterator[dict[str, str]]:
        async for task in state.runtime.task_changes(task_id, state.stream_seconds):
            yield {"event": "task", "id": task.updated_at.isoformat(),
                   "data": task.model_dump_json()}  # fmt: skip

    return Releasing(EventSourceResponse(events(), ping=15), release)


async def list_tasks(request: Request) -> Response:
    state = server_state(request)
    principal = require(request, Scope.READ)
    params = request.query_params
    status = params.get("status")
    if status is not None and status not in {s.value for s in TaskStatus}:
        known = [s.value for s in TaskStatus]
        raise Problem(400, "Invalid status", f"status must be one of {known}",
                      errors=[{"parameter": "status", "detail": "unknown status"}])  # fmt: skip
    limit_text = params.get("limit", "100")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 1000:
        raise Problem(400, "Invalid limit", "limit must be an integer from 1 to 1000",
                      errors=[{"parameter": "limit", "detail": "out of range"}])  # fmt: skip
    tool = params.get("tool")
    if tool is not None and not 1 <= len(tool) <= 64:
        raise Problem(400, "Invalid tool", "tool must be 1 to 64 characters",
                      errors=[{"parameter": "tool", "detail": "bad length"}])  # fmt: skip
    after = params.get("after")
    if after is not None and not _CURSOR.fullmatch(after):
        raise Problem(400, "Invalid cursor", "after must be the next_after of an earlier page",
                      errors=[{"parameter": "after", "detail": "not a task cursor"}])  # fmt: skip
    order = params.get("order", "newest")
    if order not in ORDERS:
        raise Problem(400, "Invalid order", f"order must be one of {list(ORDERS)}",
                      errors=[{"parameter": "order", "detail": "unknown order"}])  # fmt: skip
    # One keyset page of the ledger, with what the principal may see in the query:
    # callers' tasks only (never the runtime's timers), its own unless it sees all.
    page = await run_in_threadpool(functools.partial(
        state.runtime.task_page, status, tool=tool, limit=int(limit_text), after=after,
        newest_first=order == "newest", kinds=("action",),
        owner=None if access.sees_all(principal) else principal.name,
    ))  # fmt: skip
    shown = access.visible_tasks(principal, page.tasks)  # the same rule, checked again
    return JSONResponse({"tasks": [t.model_dump(mode="json") for t in shown],
                         "next_after": page.next_after})  # fmt: skip


async def cancel_task(request: Request) -> Response:
    state = server_state(request)
    principal = require_any(request, Scope.ENQUEUE, Scope.OPERATE)
    task_id = _task_id(request)
    task = await run_in_threadpool(
        functools.partial(
            access.cancel_task,  # the audit names the authenticated caller
            state.runtime,
            principal,
            task_id,
            f"cancelled by {principal.name} over HTTP",
        )
    )
    return JSONResponse(task.model_dump(mode="json"))


def routes() -> list[Route]:
    return [
        Route("/v1/tasks", list_tasks, methods=["GET"]),
        Route("/v1/tasks/{task_id}:cancel", cancel_task, methods=["POST"]),
        Route("/v1/tasks/{task_id}/events", task_events, methods=["GET"]),
        Route("/v1/tasks/{task_id}", get_task, methods=["GET"]),
    ]
