"""The :func:`tool` decorator: it checks a handler's signature and settings and
attaches the :class:`~agentq.tools.ToolDef` they make to the function.

The argument and result models come from the handler's annotations; a batch
handler's from the items of its ``list[...]`` annotations. A setting that cannot
work (a bad name, a periodic tool whose arguments lack defaults, ``at_most_once``
without a timeout) is a :class:`~agentq.errors.ConfigError` at import time.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ValidationError

from agentq.errors import ConfigError
from agentq.policies import parse_duration
from agentq.schedules import Periodic, Rule
from agentq.tools.definition import DEFAULT_MAX_BATCH, MAX_BATCH_LIMIT, ToolDef, attach

__all__ = ["tool"]

F = TypeVar("F", bound=Callable[..., Any])
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def tool(
    name: str | None = None,
    *,
    queue: str = "tasks",
    description: str | None = None,
    max_attempts: int | None = None,
    timeout: float | None = None,
    renew_leases: bool = True,
    requires_approval: bool = False,
    internal: bool = False,
    visible: bool = True,
    batch: bool = False,
    max_batch: int = DEFAULT_MAX_BATCH,
    batch_window: str | float | timedelta | None = None,
    batch_offset_field: str | None = None,
    idempotent: bool = True,
    reconcile: Callable[..., Any] | None = None,
    at_most_once: bool = False,
    every: str | float | timedelta | None = None,
    cron: str | None = None,
    timezone: str = "UTC",
    catch_up: int = 0,
    local: bool = False,
    settings: str | Iterable[str] = (),
) -> Callable[[F], F]:
    """Declare a tool handler ``fn(ctx, args) -> result`` (sync or async).

    ``internal`` tools are sent only by the runtime (never enqueued by an agent,
    never shown to the model); ``visible=False`` keeps an enqueueable tool out of
    :meth:`Runtime.tool_schemas`. ``every="1h"`` or ``cron="0 9 * * MON"`` (in
    ``timezone``) also makes it a periodic schedule named after the tool, whose
    runs get the argument model's defaults; ``catch_up`` is how many runs missed
    during downtime are made up (see :mod:`agentq.schedules`). ``batch_window``
    (``"10s"``) rounds new tasks' delivery up to a window, spread per entity by
    the argument ``batch_offset_field``; ``batch=True`` declares a batch handler
    ``fn(ctx: BatchContext, items: list[Args]) -> list[Result | BaseException]``
    run with up to ``max_batch`` ready tasks at once (see :mod:`agentq.batching`).

    ``idempotent=False`` says the external API does not honour the task id as an
    ``Idempotency-Key``: a call whose outcome is unknown (the worker died, the
    call timed out) is never made again by itself. ``reconcile`` is a function
    ``(ctx, args) -> result | None`` that looks the call up at the provider by
    task id; it runs *instead of* the handler on such a redelivery (None: the
    call never applied, so the handler runs). Without one the task is parked as
    ``outcome_unknown`` for an operator. ``at_most_once=True`` (needs
    ``timeout``) acks the delivery and re-sends it for after the timeout before
    the handler starts, so no lease is renewed and nothing repeats the call
    before then; see :mod:`agentq.executor.guarded` for the exact guarantees.

    ``local=True`` declares a tool that only reads and writes the application's
    own tables: its handler is ``fn(tx, args)`` with the :class:`~agentq.Decision`
    it runs in. A durable run's model calls it inside the turn's own commit; a
    call a policy sends for approval runs in the transaction that approves it.

    ``settings`` names the ``ctx.settings`` keys the handler needs (``"payments_url"``
    or several): ``agentq worker`` and ``agentq enqueue`` warn in one line when
    one of them is unset, before a task fails for want of it.
    """
    needed = (settings,) if isinstance(settings, str) else tuple(settings)
    if not all(isinstance(key, str) and key for key in needed):
        raise ConfigError(f"settings must be setting names, got {settings!r}")
    if not 1 <= max_batch <= MAX_BATCH_LIMIT:
        raise ConfigError(f"max_batch must be from 1 to {MAX_BATCH_LIMIT}, got {max_batch!r}")
    window = _window(batch_window)

    def decorate(fn: F) -> F:
        tool_name = name or fn.__name__
        if not _NAME.fullmatch(tool_name):
            raise ConfigError(f"invalid tool name {tool_name!r}")
        hints = get_type_hints(fn)
        params = list(inspect.signature(fn).parameters)
        if len(params) != 2:
            raise ConfigError(f"tool {tool_name!r}: handler must take (ctx, args)")
        args_model = hints.get(params[1])
        _check_guard(tool_name, reconcile, at_most_once, timeout)
        result_model = hints.get("return")
        if batch:
            args_model, result_model = _item(args_model), _item(result_model)
        if not (isinstance(args_model, type) and issubclass(args_model, BaseModel)):
            what = "list[<a pydantic model>]" if batch else "a pydantic model"
            raise ConfigError(f"tool {tool_name!r}: annotate the args parameter with {what}")
        if batch_offset_field is not None and batch_offset_field not in args_model.model_fields:
            raise ConfigError(
                f"tool {tool_name!r}: batch_offset_field {batch_offset_field!r} is not one of "
                f"its arguments ({', '.join(args_model.model_fields) or 'none'})"
            )
        if not (isinstance(result_model, type) and issubclass(result_model, BaseModel)):
            result_model = None
        if local and (batch or every is not None or cron is not None
                      or inspect.iscoroutinefunction(fn) or reconcile or at_most_once):
            raise ConfigError(f"tool {tool_name!r}: a local tool runs in a transaction: it "
                              "cannot be async, batched, periodic or guarded")
        definition = ToolDef(
            name=tool_name,
            handler=fn,
            args_model=args_model,
            result_model=result_model,
            queue=queue,
            description=description or inspect.getdoc(fn) or "",
            max_attempts=max_attempts,
            timeout=timeout,
            renew_leases=renew_leases,
            requires_approval=requires_approval,
            is_async=inspect.iscoroutinefunction(fn),
            internal=internal,
            visible=visible,
            batch=batch,
            max_batch=max_batch,
            batch_window=window,
            batch_offset_field=batch_offset_field,
            idempotent=idempotent,
            reconcile=reconcile,
            at_most_once=at_most_once,
            periodic=_periodic(tool_name, args_model, every, cron, timezone, catch_up),
            local=local,
            settings=needed,
        )
        attach(fn, definition)
        return fn

    return decorate


def _window(value: str | float | timedelta | None) -> timedelta | None:
    if value is None:
        return None
    try:
        window = parse_duration(value)
    except ValueError as exc:
        raise ConfigError(f"batch_window: {exc}") from None
    if window <= timedelta(0):
        raise ConfigError(f"batch_window must be more than 0, got {value!r}")
    return window


def _item(annotation: Any) -> Any:
    """``Model`` of ``list[Model]`` (or of ``list[Model | BaseException]``)."""
    if get_origin(annotation) is not list or not get_args(annotation):
        return None
    (item,) = get_args(annotation)[:1]
    for candidate in (item, *get_args(item)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _check_guard(
    name: str, reconcile: Callable[..., Any] | None, at_most_once: bool, timeout: float | None
) -> None:
    if reconcile is not None and (
        not callable(reconcile) or len(inspect.signature(reconcile).parameters) != 2
    ):
        raise ConfigError(f"tool {name!r}: reconcile must be a function taking (ctx, args)")
    if at_most_once and (timeout is None or timeout <= 0):
        raise ConfigError(
            f"tool {name!r}: at_most_once needs timeout= (seconds): its delivery is re-sent "
            "for after the timeout, the longest a run may take"
        )


def _periodic(
    name: str,
    args_model: type[BaseModel],
    every: str | float | timedelta | None,
    cron: str | None,
    timezone: str,
    catch_up: int,
) -> Periodic | None:
    """The schedule ``@tool(every=..., cron=...)`` declares, if any."""
    if every is None and cron is None:
        return None
    try:
        interval = None if every is None else parse_duration(every)
        periodic = Periodic(Rule(every=interval, cron=cron, timezone=timezone), catch_up)
        args_model.model_validate({})
    except ValidationError as exc:
        raise ConfigError(
            f"tool {name!r}: a periodic tool's runs get no arguments, so every field of "
            f"{args_model.__name__} needs a default (or declare the schedule in a policy "
            "with args)"
        ) from exc
    except (ConfigError, ValueError) as exc:
        raise ConfigError(f"tool {name!r}: {exc}") from exc
    return periodic
