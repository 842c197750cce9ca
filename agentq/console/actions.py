"""The console's actions: sign in and out, approve, reject, cancel, resolve, replay, delete.

Each action calls the same :class:`~agentq.runtime.Runtime` method as its CLI
command (``agentq approve|reject|cancel|resolve|dlq replay|dlq delete``), which audits
it in the transaction that applies it; the actor is always the signed-in
principal, never a form field. An action is refused in read-only mode (403),
without the scope it needs (403), with a cookie session but without the
session's CSRF token (403), and when the lifecycle refuses it (409: an approval
changed since the page showed it (decided, escalated, expired, voided) is
*stale*: the form carries the version it showed, and the runtime refuses the
decision inside its transaction, ``ApprovalChanged``; without a version the
approval's state alone decides).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from agentq import jsontext
from agentq.console import bulk
from agentq.console.app import COOKIE, HEADERS, Console, Who
from agentq.errors import (
    AgentQError,
    ApprovalNotFound,
    ApproverNotAllowed,
    ConfigError,
    IllegalTransition,
    RunNotFound,
    TaskNotFound,
)
from agentq.server import access
from agentq.server.auth import TooManyGuesses

__all__ = ["routes"]

#: Largest form body accepted (notes are short; anything bigger is refused).
MAX_FORM_BYTES = 64 * 1024
#: Most fields a form may have (a bulk action's ticked entries, and a few more).
MAX_FORM_FIELDS = bulk.MAX_ENTRIES + 5
#: Longest note accepted with a decision or a cancel.
MAX_NOTE_CHARS = 2000
_LOGIN_CSRF = "agentq_console_login"

#: An action's runtime call, given the actor's name and the form: it returns
#: nothing and raises when the runtime refuses. Each route's ``act`` returns it
#: with the page to return to and the message to flash.
Act = Callable[[str, FormData], None]
#: The message flashed once the action ran: text, or a function that tells it then.
Done = str | Callable[[], str]


def _field(form: FormData, name: str) -> str:
    """A text field of a form ('' when absent)."""
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _seen(form: FormData) -> str | None:
    """The approval's version the page showed (None: the poster did not say)."""
    return _field(form, "version") or None


def _note(form: FormData) -> str:
    note = _field(form, "note").strip()
    if len(note) > MAX_NOTE_CHARS:
        raise ConfigError(f"the note is longer than {MAX_NOTE_CHARS} characters")
    return note


def _changes(form: FormData) -> dict[str, Any] | None:
    """The approver's edit: a JSON object of the arguments to change (only those,
    so fields the page shows redacted keep their values); None if left empty."""
    text = _field(form, "changes").strip()
    if not text:
        return None
    if len(text) > MAX_NOTE_CHARS * 8:
        raise ConfigError("the changes are too long")
    try:
        changes = jsontext.loads(text)
    except ValueError as exc:
        raise ConfigError(f"the changes are not JSON: {exc}") from exc
    if not isinstance(changes, dict):
        raise ConfigError('the changes must be a JSON object, e.g. {"amount": 40}')
    return changes


async def _form(request: Request) -> FormData | None:
    # A form without a length (chunked) could be endless: refused like a large one.
    size = request.headers.get("content-length", "")
    if not size.isdigit() or int(size) > MAX_FORM_BYTES:
        return None
    return await request.form(max_files=0, max_fields=MAX_FORM_FIELDS)


def routes(console: Console) -> list[Route]:
    """The action routes of ``console``."""
    rt = console.runtime

    def action(scope: str, act: Callable[[Request], tuple[Act, str, Done]]) -> Callable[..., Any]:
        async def endpoint(request: Request) -> Response:
            who = await console.who(request)
            if who is None:
                return Response("sign in first", status_code=401, headers=HEADERS)

            async def refuse(status: int, text: str) -> Response:
                # Pages read the runtime (the navigation's figures): off the event loop.
                return await run_in_threadpool(console.message, request, who, status, text)

            if console.read_only:
                return await refuse(403, "the console is read-only")
            form = await _form(request)
            if form is None:
                return await refuse(413, "the form is too large (or has no Content-Length)")
            if who.session is not None and not who.session.csrf_ok(_field(form, "csrf_token")):
                return await refuse(403, "missing or wrong CSRF token")
            if not who.can(scope):
                return await refuse(403, f"{who.principal.name} lacks the {scope!r} scope")
            call, back, done = act(request)
            try:
                await run_in_threadpool(call, who.principal.name, form)
            except (TaskNotFound, ApprovalNotFound, RunNotFound) as exc:
                return await refuse(404, str(exc))
            except ApproverNotAllowed as exc:
                return await refuse(403, str(exc))
            except IllegalTransition as exc:
                return await refuse(409, str(exc))
            except AgentQError as exc:
                return await refuse(400, str(exc))
            _flash(who, done if isinstance(done, str) else done())
            return RedirectResponse(back, status_code=303)

        return endpoint

    def _flash(who: Who, text: str) -> None:
        if who.session is not None:
            console.sessions.flash(who.session.session_id, text)

    def approve(request: Request) -> tuple[Act, str, str]:
        aid = request.path_params["approval_id"]

        def act(by: str, form: FormData) -> None:
            changes = _changes(form)
            if changes is None:
                rt.approve(aid, by=by, note=_note(form), if_version=_seen(form))
                return
            # The changes go over the arguments asked, as read now; the version
            # (the page's, else this read's) makes sure they are still those.
            seen = rt.approval(aid)
            rt.approve(aid, by=by, note=_note(form), if_version=_seen(form) or seen.version,
                       args={**seen.args, **changes})  # fmt: skip

        return act, console.url(request, "approvals"), f"approved {aid}"

    def reject(request: Request) -> tuple[Act, str, str]:
        aid = request.path_params["approval_id"]
        return ((lambda by, form: _none(rt.reject(aid, by=by, note=_note(form),
                                                  if_version=_seen(form)))),
                console.url(request, "approvals"), f"rejected {aid}")  # fmt: skip

    def cancel(request: Request) -> tuple[Act, str, str]:
        tid = request.path_params["task_id"]

        def call(by: str, form: FormData) -> None:
            if access.is_internal(rt.task(tid)):
                # An approval's timer or notice changes only with its approval.
                raise TaskNotFound(f"no task {tid!r} to cancel")
            rt.cancel(tid, _note(form) or f"cancelled by {by}", by=by)

        return call, console.url(request, "task", task_id=tid), f"cancelled {tid}"

    def cancel_run(request: Request) -> tuple[Act, str, str]:
        rid = request.path_params["run_id"]
        # Its queued turn and unfinished calls (their approvals, their timers) with it.
        return ((lambda by, form: _none(rt.cancel_run(rid, _note(form) or "cancelled", by=by))),
                console.url(request, "run", run_id=rid), f"cancelled run {rid}")  # fmt: skip

    def resolve(request: Request) -> tuple[Act, str, str]:
        tid = request.path_params["task_id"]

        def call(by: str, form: FormData) -> None:
            how, text = _field(form, "resolution"), _field(form, "result").strip()
            try:
                result = jsontext.loads(text) if how == "succeeded" and text else None
            except ValueError as exc:
                raise ConfigError(f"the result is not JSON: {exc}") from None
            rt.resolve(tid, how, result=result, by=by, note=_note(form))

        return call, console.url(request, "task", task_id=tid), f"resolved {tid}"

    def replay(request: Request) -> tuple[Act, str, str]:
        eid = request.path_params["entry_id"]
        return ((lambda by, _form: _none(rt.replay(eid, by=by))),
                console.url(request, "dead_letters"), f"replayed {eid}")  # fmt: skip

    def replay_task(request: Request) -> tuple[Act, str, str]:
        tid = request.path_params["task_id"]
        return ((lambda by, _form: _none(rt.replay(tid, by=by))),
                console.url(request, "task", task_id=tid), f"replayed {tid}")  # fmt: skip

    def replay_many(request: Request) -> tuple[Act, str, Done]:
        call, told = bulk.replay_selected(rt)
        return call, console.url(request, "dead_letters"), told

    def delete_many(request: Request) -> tuple[Act, str, Done]:
        call, told = bulk.delete_selected(rt)
        return call, console.url(request, "dead_letters"), told

    def delete(request: Request) -> tuple[Act, str, str]:
        eid = request.path_params["entry_id"]

        def call(by: str, _form: FormData) -> None:
            if not rt.delete_dead_letters([eid], by=by):
                raise TaskNotFound(f"no dead-letter entry {eid!r}")

        return call, console.url(request, "dead_letters"), f"deleted dead letter {eid}"

    async def login_form(request: Request) -> Response:
        nonce = secrets.token_urlsafe(24)
        response = console.render(request, "login.html", None, nonce=nonce, next=_next(request))
        response.set_cookie(
            _LOGIN_CSRF, nonce, max_age=600, path=console.cookie_path(request),
            httponly=True, samesite="strict", secure=request.url.scheme == "https",
        )  # fmt: skip
        return response

    async def login(request: Request) -> Response:
        form = await _form(request)
        nonce = request.cookies.get(_LOGIN_CSRF, "")
        if (
            form is None
            or not nonce
            or not secrets.compare_digest(nonce.encode(), _field(form, "nonce").encode())
        ):
            return console.message(request, None, 403, "the login form expired: reload it")
        try:
            principal = await console.principal_for(_field(form, "token"), request)
        except TooManyGuesses as exc:
            page = console.render(request, "login.html", None, 429, nonce=nonce,
                                  next=_next(request, form), error=str(exc))  # fmt: skip
            page.headers["Retry-After"] = exc.retry_after
            return page
        if principal is None:
            page = console.render(request, "login.html", None, 401, nonce=nonce,
                                  next=_next(request, form), error="unknown token")  # fmt: skip
            return page
        session = console.sessions.start(principal)
        response = RedirectResponse(_next(request, form), status_code=303)
        response.set_cookie(
            COOKIE, session.session_id, max_age=int(console.sessions.ttl),
            path=console.cookie_path(request), httponly=True, samesite="strict",
            secure=request.url.scheme == "https",
        )  # fmt: skip
        response.delete_cookie(_LOGIN_CSRF, path=console.cookie_path(request))
        return response

    async def logout(request: Request) -> Response:
        who = await console.who(request)
        form = await _form(request)
        session = who.session if who is not None else None
        if session is not None and form is not None and session.csrf_ok(_field(form, "csrf_token")):
            console.sessions.end(session.session_id)
        response = RedirectResponse(console.url(request, "login"), status_code=303)
        response.delete_cookie(COOKIE, path=console.cookie_path(request))
        return response

    def _next(request: Request, form: FormData | None = None) -> str:
        """Where to go after signing in: a path inside the console, nothing else."""
        wanted = (_field(form, "next") if form else "") or request.query_params.get("next", "")
        home = console.url(request, "overview")
        inside = wanted.startswith(home) and "//" not in wanted and "\\" not in wanted
        return wanted if inside else home

    return [
        Route("/login", login_form, methods=["GET"], name="login"),
        Route("/login", login, methods=["POST"], name="login_post"),
        Route("/logout", logout, methods=["POST"], name="logout"),
        Route("/approvals/{approval_id}/approve", action("approve", approve),
              methods=["POST"], name="approve"),
        Route("/approvals/{approval_id}/reject", action("approve", reject),
              methods=["POST"], name="reject"),
        Route("/tasks/{task_id}/cancel", action("operate", cancel),
              methods=["POST"], name="cancel"),
        Route("/runs/{run_id}/cancel", action("operate", cancel_run),
              methods=["POST"], name="cancel_run"),
        Route("/tasks/{task_id}/resolve", action("admin", resolve),
              methods=["POST"], name="resolve"),
        Route("/tasks/{task_id}/replay", action("admin", replay_task),
              methods=["POST"], name="replay_task"),
        Route("/dead-letters/replay", action("admin", replay_many),
              methods=["POST"], name="replay_many"),
        Route("/dead-letters/delete", action("admin", delete_many),
              methods=["POST"], name="delete_many"),
        Route("/dead-letters/{entry_id}/replay", action("admin", replay),
              methods=["POST"], name="replay"),
        Route("/dead-letters/{entry_id}/delete", action("admin", delete),
              methods=["POST"], name="delete"),
    ]  # fmt: skip


def _none(_: Any) -> None:
    return None
