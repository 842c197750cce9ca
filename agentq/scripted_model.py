"""A scripted OpenAI-compatible chat-completions server on loopback, for tests.

:class:`ScriptedModel` serves ``POST /v1/chat/completions`` and ``GET /v1/models``
on ``127.0.0.1`` (a free port) in OpenAI's shapes, answering from a script: a
sequence of :class:`~agentq.scripted_replies.Reply` indexed by turn, or a
function of the :class:`~agentq.scripted_replies.ModelRequest`. The turn is read
from the request itself (1 + its assistant messages), so a conversation gets the
same answer from a restarted server, while every answer mints fresh tool-call ids
as real providers do. On top of the script, faults can be queued
(:meth:`ScriptedModel.fail_next`, :meth:`ScriptedModel.stall_next`), hooks run
after an answer is computed and before it is sent (the window a chaos test kills
a worker in), and every request is recorded per run and turn for counting.
The HTTP itself (routes, credentials, limits, error shapes) is
:mod:`agentq.scripted_http`; the value types are :mod:`agentq.scripted_replies`.
"""

from __future__ import annotations

import secrets
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

from agentq.clock import Clock, SystemClock
from agentq.scripted_http import MAX_BODY_BYTES, Answer, OpenAIServer, error_body
from agentq.scripted_replies import (
    DONE,
    InvalidRequest,
    ModelRequest,
    RecordedRequest,
    Reply,
    completion_body,
    parse_request,
)

__all__ = ["MAX_BODY_BYTES", "AnsweredHook", "Script", "ScriptedModel"]

#: A sequence of replies (turn n answers ``script[n - 1]``) or a function of the request.
Script = Sequence[Reply] | Callable[[ModelRequest], Reply]

#: Called with the request and its record once the answer is computed, before it is sent.
AnsweredHook = Callable[[ModelRequest, RecordedRequest], None]


@dataclass
class _Fault:
    reply: Reply
    remaining: int
    turn: int | None


@dataclass
class _Stall:
    seconds: float
    turn: int | None


_Queued = TypeVar("_Queued", _Fault, _Stall)


class ScriptedModel:
    """An OpenAI-compatible model on loopback that answers from a script.

    ``script`` is a sequence of :class:`~agentq.scripted_replies.Reply` (turn n
    answers ``script[n - 1]``; past its end, and with no script, a plain
    ``"done"``) or a function of the
    :class:`~agentq.scripted_replies.ModelRequest` returning a ``Reply`` (called
    from the server's threads, possibly at once). Use it as a context manager or
    call :meth:`start` / :meth:`stop`; :attr:`base_url` is what an OpenAI client
    takes. ``port`` 0 picks a free one (pass a stopped model's port to restart
    it at the same address). With ``api_key``, requests without
    ``Authorization: Bearer <api_key>`` get 401. ``on_answered`` is a first
    :meth:`hook`. Delays wait on ``clock`` (default the real one).
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "scripted",
        api_key: str | None = None,
        on_answered: AnsweredHook | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not (script is None or callable(script)) and (
            isinstance(script, str | bytes) or not all(isinstance(r, Reply) for r in script)
        ):
            raise TypeError("a script is a sequence of Reply or a function returning one")
        self.model = model
        self._script = script
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._records: list[RecordedRequest] = []
        self._faults: list[_Fault] = []
        self._stalls: list[_Stall] = []
        self._hooks: list[AnsweredHook] = [] if on_answered is None else [on_answered]
        listed = {"id": model, "object": "model", "owned_by": "agentq"}
        self._http = OpenAIServer(
            host, port, complete=self._complete, api_key=api_key, clock=self._clock,
            models=[listed | {"created": int(self._clock.now().timestamp())}],
        )  # fmt: skip

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self._http.address[1]

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:54321/v1``."""
        host, port = self._http.address
        return f"http://{host}:{port}/v1"

    def start(self) -> ScriptedModel:
        """Serve in a background (daemon) thread. A stopped model does not start
        again: make another on its :attr:`port`."""
        self._http.start()
        return self

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving: close the listening socket and every open connection
        (answers held back by a delay are never sent), then wait up to ``grace``
        seconds for the handlers still running (a hook may be). Idempotent."""
        self._http.stop(grace)

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail_next(
        self,
        status: int,
        *,
        count: int = 1,
        retry_after: float | None = None,
        turn: int | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests (only those of ``turn``, if given) with
        the error ``status`` before the script: 429 with ``Retry-After``, 500, 503..."""
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        reply = Reply.error(status, retry_after=retry_after, message=message)
        with self._lock:
            self._faults.append(_Fault(reply, count, turn))

    def stall_next(self, seconds: float, *, turn: int | None = None) -> None:
        """Hold back the answer to the next request (of ``turn``, if given) ``seconds``
        more (added to its reply's own delay)."""
        if seconds < 0:
            raise ValueError(f"a stall cannot be negative, not {seconds!r}")
        with self._lock:
            self._stalls.append(_Stall(seconds, turn))

    def hook(self, fn: AnsweredHook) -> AnsweredHook:
        """Call ``fn(request, record)`` after each chat-completions answer is computed
        (and any delay waited), just before it is sent; hooks run in the order
        added, in the server's thread. ``record.status`` says what is answered.
        An exception in a hook drops the connection unanswered (and is printed).
        Returns ``fn``, so it can decorate."""
        with self._lock:
            self._hooks.append(fn)
        return fn

    #: Another name for :meth:`hook`.
    on_answered = hook

    def requests(self) -> list[RecordedRequest]:
        """Every chat-completions request answered so far, in arrival order (a copy).
        Requests refused before the script is consulted (401, 404, 413, and 400
        for a body that is no valid chat-completions request) are not recorded."""
        with self._lock:
            return list(self._records)

    def requests_per_turn(self) -> Counter[tuple[str | None, int]]:
        """How many answers (200, sent) each ``(run_id, run_turn)`` got. An answer
        sent to a client that had gone (a killed worker) counts: the model answered."""
        return Counter(
            (r.run_id, r.run_turn) for r in self.requests() if r.status == 200 and not r.unsent
        )

    def attempts_per_turn(self) -> Counter[tuple[str | None, int]]:
        """How many requests each ``(run_id, run_turn)`` made, whatever the answer."""
        return Counter((r.run_id, r.run_turn) for r in self.requests())

    def _complete(self, body: Any, headers: dict[str, str]) -> Answer:
        """Decide and record the answer to one request (the server's ``complete``)."""
        at = self._clock.now()
        try:
            request = parse_request(body, headers)
        except InvalidRequest as exc:
            return Answer(400, error_body(400, str(exc)))
        with self._lock:
            stall = _take(self._stalls, request.turn)
            fault = _take(self._faults, request.turn)
        reply = fault.reply if fault is not None else self._scripted(request)
        delay = reply.delay + (stall.seconds if stall is not None else 0.0)
        answer_headers: dict[str, str] = {}
        call_ids: tuple[str, ...] = ()
        completion_id: str | None = None
        if reply.status == 200:
            # Fresh ids on every request, as real providers mint them.
            call_ids = tuple(f"call_{secrets.token_hex(12)}" for _ in reply.calls)
            completion_id = f"chatcmpl-{secrets.token_hex(12)}"
            answer = completion_body(
                reply, request, model=request.model, created=int(at.timestamp()),
                completion_id=completion_id, call_ids=call_ids,
            )  # fmt: skip
        else:
            answer = error_body(reply.status, reply.message)
            if reply.retry_after is not None:
                answer_headers["Retry-After"] = f"{reply.retry_after:g}"
        record = RecordedRequest(
            run_id=request.run_id, run_turn=request.run_turn, turn=request.turn,
            status=reply.status, call_ids=call_ids, completion_id=completion_id,
            idempotency_key=request.idempotency_key, at=at,
        )  # fmt: skip
        with self._lock:
            self._records.append(record)
            hooks = list(self._hooks)
        before_send = partial(_run_hooks, hooks, request, record)
        unsent = partial(self._unsent, record)
        return Answer(reply.status, answer, answer_headers, delay, before_send, unsent)

    def _unsent(self, record: RecordedRequest) -> None:
        with self._lock:
            for i, recorded in enumerate(self._records):
                if recorded is record:
                    self._records[i] = replace(record, unsent=True)

    def _scripted(self, request: ModelRequest) -> Reply:
        script = self._script
        if script is None:
            return DONE
        if not callable(script):
            return script[request.turn - 1] if request.turn <= len(script) else DONE
        try:
            reply = script(request)
        except Exception as exc:
            # A bug in the test's script: shown to the client and printed in full.
            traceback.print_exc()
            return Reply.error(500, message=f"the script raised {type(exc).__name__}: {exc}")
        if not isinstance(reply, Reply):
            return Reply.error(500, message=f"the script returned {type(reply).__name__}")
        return reply


def _run_hooks(hooks: list[AnsweredHook], request: ModelRequest, record: RecordedRequest) -> None:
    for hook in hooks:
        hook(request, record)


def _take(queue: list[_Queued], turn: int) -> _Queued | None:
    """The first queued fault or stall for ``turn``, used up (a fault counts down)."""
    for i, item in enumerate(queue):
        if item.turn is None or item.turn == turn:
            if isinstance(item, _Fault) and item.remaining > 1:
                item.remaining -= 1
            else:
                del queue[i]
            return item
    return None
