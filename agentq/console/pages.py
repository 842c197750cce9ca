"""The console's pages (every one needs the ``read`` scope) and its event stream.

Pages read the runtime in a worker thread (the backends block), never on the
event loop. The event stream sends the queue figures every
``refresh_seconds`` as an HTML fragment that htmx's SSE extension swaps in.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from agentq import overview as overview_counts
from agentq.console import charts, login_links, panels, run_views, views
from agentq.console.app import HEADERS, Console, Who
from agentq.errors import ApprovalError, RunNotFound, TaskNotFound
from agentq.ledger import TaskStatus
from agentq.run_info import RunStatus
from agentq.server import access

__all__ = ["routes"]

Page = Callable[[Request, Who], Response]
#: How long a browser refused a stream (too many open) waits before it retries.
BUSY_RETRY_MS = 10_000


def routes(console: Console) -> list[Route]:
    """The page routes of ``console``."""

    def page(build: Page, *scopes: str) -> Callable[[Request], Any]:
        """A page for principals with one of ``scopes`` (default: ``read``)."""
        needed = scopes or ("read",)

        async def endpoint(request: Request) -> Response:
            who = await console.who(request)
            session = None
            if who is None:  # --insecure-local signs a loopback browser in by itself
                session = await login_links.local_session(console, request)
                if session is None:
                    return console.to_login(request)
                who = Who(session.principal, session)
            if not any(who.can(s) for s in needed):
                return console.message(request, who, 403, "your token may not read the console")
            response = await run_in_threadpool(build, request, who)
            if session is not None:
                login_links.set_session_cookie(console, request, response, session)
            return response

        return endpoint

    def overview(request: Request, who: Who) -> Response:
        rt = console.runtime
        now = rt.clock.now()
        window = request.query_params.get("window", "1h")
        if window not in charts.WINDOWS:
            return console.message(request, who, 400, f"unknown window {window!r}: 1h or 24h")
        ended = charts.buckets(rt.backend, now, window, panels.chart_owner(who.principal))
        return console.render(
            request, "overview.html", who, counts=views.status_counts(rt, who.principal),
            dead=overview_counts.dead_letter_count(rt.backend), seq=0, now=now,
            schedules=len(rt.schedules()),
            chart=charts.chart(ended, window), window=window, windows=list(charts.WINDOWS),
            **panels.live_panels(rt, who.principal, now),
        )  # fmt: skip

    def tasks(request: Request, who: Who) -> Response:
        q = request.query_params
        status, tool, search = q.get("status", ""), q.get("tool", ""), q.get("q", "")
        if status and status not in {s.value for s in TaskStatus}:
            return console.message(request, who, 400, f"unknown status {status!r}")
        after = q.get("after") or None
        # The runtime's own tasks (timers, notices) only on request, and only to
        # those who may see them at all (operate, admin): docs/explanations/security.md.
        internal = q.get("internal") == "1" and access.sees_all(who.principal)
        # One page (the filters in the query, a keyset cursor): never the whole ledger.
        rows, next_after = views.task_rows(console.runtime, status=status, tool=tool,
                                           search=search, principal=who.principal,
                                           internal=internal, after=after)  # fmt: skip
        tools = sorted(t.name for t in console.runtime.known_tools()  # not the ledger
                       if internal or not console.runtime.is_internal(t.name))  # fmt: skip
        return console.render(
            request, "tasks.html", who, rows=rows, next_after=next_after, status=status,
            tool=tool, search=search, statuses=[s.value for s in TaskStatus], tools=tools,
            internal=internal, may_see_internal=access.sees_all(who.principal),
        )  # fmt: skip

    def task(request: Request, who: Who) -> Response:
        task_id = request.path_params["task_id"]
        try:
            detail = views.task_detail(console.runtime, task_id, who.principal)
            extras = panels.task_extras(console.runtime, detail["task"], who.principal)
        except (TaskNotFound, ApprovalError) as exc:
            return console.message(request, who, 404, str(exc))
        return console.render(request, "task.html", who, **detail, **extras)

    def runs(request: Request, who: Who) -> Response:
        q = request.query_params
        status, agent = q.get("status", ""), q.get("agent", "")
        if status and status not in {s.value for s in RunStatus}:
            return console.message(request, who, 400, f"unknown status {status!r}")
        # One page (the owner and filters in the query, a keyset cursor).
        rows, next_after = run_views.run_rows(console.runtime, status=status, agent=agent,
                                              principal=who.principal,
                                              after=q.get("after") or None)  # fmt: skip
        return console.render(
            request, "runs.html", who, rows=rows, next_after=next_after, status=status,
            agent=agent, statuses=[s.value for s in RunStatus],
            agents=run_views.agent_names(console.runtime),
        )  # fmt: skip

    def run(request: Request, who: Who) -> Response:
        try:
            detail = run_views.run_detail(console.runtime, request.path_params["run_id"],
                                          who.principal)  # fmt: skip
        except RunNotFound as exc:
            return console.message(request, who, 404, str(exc))
        return console.render(request, "run.html", who, **detail)

    def approvals(request: Request, who: Who) -> Response:
        open_, decided = views.approval_inbox(console.runtime, who.principal)
        # The conversation that led to a run's call: what the approver decides on.
        talks = run_views.approval_conversations(console.runtime,
                                                 [row["approval"] for row in open_])  # fmt: skip
        return console.render(
            request, "approvals.html", who, open=open_, decided=decided,
            now=console.runtime.clock.now(), conversations=talks,
        )  # fmt: skip

    def dead_letters(request: Request, who: Who) -> Response:
        # One page (a keyset cursor), and the count the backend keeps.
        after = request.query_params.get("after") or None
        rows, next_after = views.dead_letter_rows(console.runtime, after)
        total = overview_counts.dead_letter_count(console.runtime.backend)
        return console.render(request, "dead_letters.html", who, rows=rows, total=total,
                              next_after=next_after)  # fmt: skip

    def schedules(request: Request, who: Who) -> Response:
        rows = sorted(console.runtime.schedules(), key=lambda s: (s.status == "removed", s.name))
        return console.render(request, "schedules.html", who, rows=rows)

    def audit(request: Request, who: Who) -> Response:
        # One page (a keyset cursor: the last entry's id), and one entry more to
        # know whether an older page exists.
        after = request.query_params.get("after") or None
        entries = console.runtime.audit_log(limit=views.AUDIT_PAGE + 1, after=after)
        shown = entries[: views.AUDIT_PAGE]
        next_after = shown[-1].audit_id if len(entries) > views.AUDIT_PAGE else None
        return console.render(request, "audit.html", who, audit=shown, next_after=next_after)

    async def events(request: Request) -> Response:
        who = await console.who(request)
        if who is None or not who.can("read"):
            return Response("sign in first", status_code=401, headers=HEADERS)
        fragment = console.templates.get_template("_queues.html")
        workers = console.templates.get_template("_workers.html")

        async def stream() -> AsyncIterator[str]:
            # Counted here, where a finally always runs once the stream has started.
            if console.open_streams >= console.max_streams:
                yield f"retry: {BUSY_RETRY_MS}\n: too many open streams, retry later\n\n"
                return
            console.open_streams += 1
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + console.stream_seconds
                seq = 0
                yield f"retry: {int(console.refresh_seconds * 1000)}\n\n"
                while loop.time() < deadline:
                    seq += 1
                    now = console.runtime.clock.now()
                    live = await run_in_threadpool(
                        panels.live_panels, console.runtime, who.principal, now
                    )
                    for event, template in (("queues", fragment), ("workers", workers)):
                        html = template.render(**live, seq=seq, now=now)
                        data = "".join(f"data: {line}\n" for line in html.splitlines())
                        yield f"event: {event}\n{data}\n"
                    await asyncio.sleep(console.refresh_seconds)
            finally:
                console.open_streams -= 1

        headers = {**HEADERS, "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    return [
        Route("/", page(overview), name="overview"),
        Route("/events", events, name="events"),
        Route("/tasks", page(tasks), name="tasks"),
        Route("/tasks/{task_id}", page(task), name="task"),
        Route("/runs", page(runs), name="runs"),
        Route("/runs/{run_id}", page(run), name="run"),
        # An approve-only token reads the approvals it may decide (issue 27 item 4).
        Route("/approvals", page(approvals, "read", "approve"), name="approvals"),
        # Everyone's dead letters (their arguments) and the whole audit: operators'.
        Route("/dead-letters", page(dead_letters, "operate"), name="dead_letters"),
        Route("/audit", page(audit, "operate"), name="audit"),
        # Schedule runs are everyone's tasks (their status, their next time).
        Route("/schedules", page(schedules, "operate"), name="schedules"),
    ]
