"""Durable agent run routes: start, read (with ``Prefer: wait=N``), list,
events, cancel, and the user's next message.

* ``POST /v1/runs`` — body ``{"agent": ..., "input": ...}``: start a run of the
  agent (needs ``enqueue``; the principal owns it, and its tool calls are
  enqueued in its name). **201** with the run and ``Location: /v1/runs/{id}``;
  with ``Idempotency-Key`` the same key and body again is **200** with the run
  it started, whatever it has done since (the model is not asked again), the
  same key with another body **422**, a retry while the first request is
  still being processed **409**. Keys are per principal. An unknown agent is
  **404**, as an unknown tool is.
* ``GET /v1/runs/{id}`` — the run; with ``Prefer: wait=N`` the answer waits
  until it is idle (done, or awaiting a human's approval; ``until=done``:
  done) or N seconds (at most the server's ``max_wait``) pass, woken by the
  commits that write it, and says ``Preference-Applied: wait=N``.
* ``GET /v1/runs/{id}/events`` — server-sent events: one ``run`` event with the
  run now and one at each change, ending when it is idle (``until=done``: done).
* ``GET /v1/runs?status=&agent=&limit=&after=`` — a page of runs, newest first,
  and ``next_after``, the ``after`` of the next page (``null`` after the last).
* ``POST /v1/runs/{id}:cancel`` — body ``{"reason": ...}`` (optional): cancel the
  run, its queued turn and its unfinished tool calls (409 if it is done).
* ``POST /v1/runs/{id}/messages`` — body ``{"text": ...}``: continue a run that
  answered (succeeded) with the user's next message; its next turn is queued
  (409 in any other state). Only the run's owner writes to it (403 for another
  principal that sees it). With ``Idempotency-Key``, a retry with the same key
  and text appends nothing and answers the run as it is; another text is 422.

Long-polls and event streams count against the principal's open waits, as the
task routes' do (429 with ``Retry-After`` beyond). Each route answers only
about runs the principal may see (its own; everyone's with ``operate`` or
``admin``): any other id is 404, as one that does not exist
(:mod:`agentq.server.access`).
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import re
from collections.abc import AsyncIterator, Iterable
from typing import Any

from pydantic import BaseModel, ValidationError
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentq.agents import TURN_TOOL_PREFIX
from agentq.errors import IdempotencyConflict, InvalidArguments, UnknownTool
from agentq.run_info import RunInfo, RunStatus
from agentq.runtime import Runtime
from agentq.runtime.runs import MAX_RUNS_LISTED
from agentq.server import access
from agentq.server.actions import parse_idempotency_key, stored_name
from agentq.server.auth import Principal, Scope, require, require_any
from agentq.server.openapi_runs import RunCancel, RunMessage, RunStart
from agentq.server.problems import Problem, field_errors
from agentq.server.state import Releasing, ServerState, read_json, server_state
from agentq.server.tasks import parse_prefer_wait

__all__ = ["routes"]

_MAX_ID = 200
#: The longest Idempotency-Key a run takes (the runtime keeps 200 characters).
_MAX_KEY = 200
#: A page cursor is a run id (``next_after`` of the page before).
_CURSOR = re.compile(r"^run_[!-~]{1,196}$")
_AGENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")
_UNTIL = ("idle", "done")


def _run_id(request: Request) -> str:
    run_id: str = request.path_params["run_id"]
    if len(run_id) > _MAX_ID:
        raise Problem(404, "Run not found", "no such run")
    return run_id


def _until(request: Request) -> str:
    until = request.query_params.get("until", "idle")
    if until not in _UNTIL:
        raise Problem(400, "Invalid until", f"until must be one of {list(_UNTIL)}",
                      errors=[{"parameter": "until", "detail": "unknown value"}])  # fmt: skip
    return until


def _settled(run: RunInfo, until: str) -> bool:
    return run.done or (until == "idle" and run.idle)


def _known_agents(rt: Runtime) -> set[str]:
    """The agents whose runs this server starts: the runtime's own, and those
    whose turn tool the database's catalog records (a server without the
    tools' code starts runs of the agents its workers serve)."""
    turns = {t.name.removeprefix(TURN_TOOL_PREFIX) for t in rt.known_tools()
             if t.name.startswith(TURN_TOOL_PREFIX)}  # fmt: skip
    return set(rt.agents) | turns


def _unknown_agent(name: str, known: Iterable[str]) -> str:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown agent {name!r}{hint}; agents here: {', '.join(names) or 'none'}"


def _run_json(run: RunInfo) -> dict[str, Any]:
    return run.model_dump(mode="json")


def _run_response(run: RunInfo, status: int = 200) -> Response:
    return JSONResponse(_run_json(run), status_code=status,
                        headers={"Location": f"/v1/runs/{run.run_id}"})  # fmt: skip


def _parsed(model: type[BaseModel], body: Any) -> Any:
    """``body`` as ``model``, or the 422 problem naming each field at fault."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise Problem(422, "Invalid request", "the body does not fit",
                      errors=field_errors(exc)) from exc  # fmt: skip


def _request_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` (400 if malformed or too long)."""
    key = parse_idempotency_key(request.headers.get("idempotency-key"))
    if key is not None and len(key) > _MAX_KEY:
        raise Problem(400, "Invalid Idempotency-Key", f"a run's key is 1 to {_MAX_KEY} characters",
                      errors=[{"header": "Idempotency-Key", "detail": "too long"}])  # fmt: skip
    return key


async def start_run(request: Request) -> Response:
    state = server_state(request)
    principal = require(request, Scope.ENQUEUE)
    rt = state.runtime
    key = _request_key(request)
    start: RunStart = _parsed(RunStart, await read_json(request))
    in_flight = None if key is None else f"run:{stored_name(principal.name)}:{key}"
    if in_flight is not None and in_flight in state.in_flight:
        raise Problem(409, "Request in progress",
                      "the first request with this Idempotency-Key is still being processed",
                      errors=[{"header": "Idempotency-Key", "detail": "in progress"}])  # fmt: skip
    if in_flight is not None:
        state.in_flight.add(in_flight)
    try:
        submitted = await run_in_threadpool(functools.partial(
            rt.submit_run, start.agent, start.input, idempotency_key=key, by=principal.name,
        ))  # fmt: skip
    except UnknownTool as exc:
        errors = [{"pointer": "/agent", "detail": "no such agent"}]
        known = await run_in_threadpool(_known_agents, rt)
        raise Problem(404, "Unknown agent", _unknown_agent(start.agent, known),
                      errors=errors) from exc  # fmt: skip
    except IdempotencyConflict as exc:
        raise Problem(422, "Idempotency-Key reused with another request", str(exc),
                      errors=[{"header": "Idempotency-Key",
                               "detail": "reused with another body"}]) from exc  # fmt: skip
    except InvalidArguments as exc:
        raise Problem(422, "Invalid request", str(exc),
                      errors=[{"pointer": "/input", "detail": str(exc)}]) from exc  # fmt: skip
    finally:
        if in_flight is not None:
            state.in_flight.discard(in_flight)
    return _run_response(submitted.run, 201 if submitted.created else 200)


async def get_run(request: Request) -> Response:
    state = server_state(request)
    principal = require(request, Scope.READ)
    run_id = _run_id(request)
    until = _until(request)
    wait = parse_prefer_wait(request.headers.get("prefer"))
    headers = {"Vary": "Prefer"}
    run = await run_in_threadpool(access.run_for, state.runtime, principal, run_id)
    if wait:
        seconds = min(wait, int(state.max_wait))
        if not _settled(run, until):
            release = state.waits.take(principal.name)  # 429 beyond the principal's share
            try:
                run = await _wait_unless_closing(state, principal, run_id, seconds, until)
            finally:
                release()
        headers["Preference-Applied"] = f"wait={seconds}"
    return JSONResponse(_run_json(run), headers=headers)


async def _wait_unless_closing(
    state: ServerState, principal: Principal, run_id: str, seconds: int, until: str
) -> RunInfo:
    """The run once settled or after ``seconds``; as it is now if the server
    starts to stop meanwhile (as a task's long-poll does)."""
    waiting = asyncio.ensure_future(state.runtime.wait_run_async(run_id, seconds, until=until))
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
    return await run_in_threadpool(access.run_for, state.runtime, principal, run_id)


async def run_events(request: Request) -> Response:
    state = server_state(request)
    principal = require(request, Scope.READ)
    run_id = _run_id(request)
    until = _until(request)
    # 404 before the stream starts (also for a run the principal may not see).
    await run_in_threadpool(access.run_for, state.runtime, principal, run_id)
    release = state.waits.take(principal.name)  # 429 beyond the principal's share

    async def events() -> AsyncIterator[dict[str, str]]:
        changes = state.runtime.run_changes(run_id, state.stream_seconds, until=until)
        async for run in changes:
            yield {"event": "run", "id": run.updated_at.isoformat(),
                   "data": run.model_dump_json()}  # fmt: skip

    return Releasing(EventSourceResponse(events(), ping=15), release)


async def list_runs(request: Request) -> Response:
    state = server_state(request)
    principal = require(request, Scope.READ)
    params = request.query_params
    status = params.get("status")
    if status is not None and status not in {s.value for s in RunStatus}:
        known = [s.value for s in RunStatus]
        raise Problem(400, "Invalid status", f"status must be one of {known}",
                      errors=[{"parameter": "status", "detail": "unknown status"}])  # fmt: skip
    limit_text = params.get("limit", "100")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_RUNS_LISTED:
        raise Problem(400, "Invalid limit", f"limit must be an integer from 1 to {MAX_RUNS_LISTED}",
                      errors=[{"parameter": "limit", "detail": "out of range"}])  # fmt: skip
    agent = params.get("agent")
    if agent is not None and not _AGENT.match(agent):
        raise Problem(400, "Invalid agent", "agent must be an agent's name",
                      errors=[{"parameter": "agent", "detail": "not an agent name"}])  # fmt: skip
    after = params.get("after")
    if after is not None and not _CURSOR.match(after):
        raise Problem(400, "Invalid cursor", "after must be the next_after of an earlier page",
                      errors=[{"parameter": "after", "detail": "not a run cursor"}])  # fmt: skip
    # What the principal may see is part of the query: its own runs unless it sees all.
    page = await run_in_threadpool(functools.partial(
        state.runtime.run_page, status, agent=agent, limit=int(limit_text), after=after or "",
        owner=None if access.sees_all(principal) else principal.name,
    ))  # fmt: skip
    shown = access.visible_runs(principal, page.runs)  # the same rule, checked again
    return JSONResponse({"runs": [_run_json(r) for r in shown], "next_after": page.next_after})


async def cancel_run(request: Request) -> Response:
    state = server_state(request)
    principal = require_any(request, Scope.ENQUEUE, Scope.OPERATE)
    run_id = _run_id(request)
    body: RunCancel = _parsed(RunCancel, await read_json(request, optional=True))
    reason = body.reason or "cancelled over HTTP"
    # The reason is recorded with the authenticated caller's name.
    run = await run_in_threadpool(access.cancel_run, state.runtime, principal, run_id, reason)
    return _run_response(run)


async def send_message(request: Request) -> Response:
    state = server_state(request)
    principal = require(request, Scope.ENQUEUE)
    run_id = _run_id(request)
    key = _request_key(request)
    raw = await read_json(request)
    rt = state.runtime
    # The run first (404), then whether the body fits it (422).
    run = await run_in_threadpool(access.run_for, rt, principal, run_id)
    body: RunMessage = _parsed(RunMessage, raw)
    if run.owner != principal.name:
        raise Problem(403, "Not the run's owner",
                      f"only {run.owner!r}, who started run {run_id!r}, writes to it")  # fmt: skip
    try:
        run = await run_in_threadpool(
            functools.partial(rt.send_message, run_id, body.text, by=principal.name,
                              idempotency_key=key)
        )
    except IdempotencyConflict as exc:
        raise Problem(422, "Idempotency-Key reused with another request", str(exc),
                      errors=[{"header": "Idempotency-Key",
                               "detail": "reused with another body"}]) from exc  # fmt: skip
    except InvalidArguments as exc:
        raise Problem(422, "Invalid request", str(exc),
                      errors=[{"pointer": "/text", "detail": str(exc)}]) from exc  # fmt: skip
    return _run_response(run)


async def runs_collection(request: Request) -> Response:
    # One route for both methods: a 405 (and OPTIONS) names both in ``Allow``.
    if request.method == "POST":
        return await start_run(request)
    return await list_runs(request)


def routes() -> list[Route]:
    return [
        Route("/v1/runs", runs_collection, methods=["GET", "POST"]),
        Route("/v1/runs/{run_id}:cancel", cancel_run, methods=["POST"]),
        Route("/v1/runs/{run_id}/messages", send_message, methods=["POST"]),
        Route("/v1/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/v1/runs/{run_id}", get_run, methods=["GET"]),
    ]
