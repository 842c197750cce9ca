"""How listings print: a table for people, ``--json`` (one document) or
``--jsonl`` (one object a line) for scripts. Everything printed is redacted."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentq.redact import redact_data, redact_text

if TYPE_CHECKING:
    from agentq.ledger import TaskInfo

__all__ = ["add_format_args", "age", "emit", "print_json", "print_record", "print_task"]

_CELL = 40  # widest table cell; longer values are cut with an ellipsis


def add_format_args(p: argparse.ArgumentParser) -> None:
    """``--json`` / ``--jsonl`` (the default is a table)."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print one JSON document")
    group.add_argument("--jsonl", action="store_true", help="print one JSON object per line")


def _dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(redact_data(value), sort_keys=True, indent=indent, default=str)


def print_json(value: Any) -> None:
    """One redacted JSON document."""
    print(_dumps(value, indent=2))


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        text = value.isoformat(timespec="seconds")
    elif isinstance(value, float):
        text = f"{value:.1f}"
    elif isinstance(value, dict | list):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    return redact_text(" ".join(text.split()))


def _cell(value: Any) -> str:
    text = _text(value)
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


def print_record(args: argparse.Namespace, record: Mapping[str, Any], block: str = "") -> None:
    """One record: a JSON document (--json), one line (--jsonl), or ``field  value``
    lines in full, with the multi-line field ``block`` (a traceback) last, as is."""
    if getattr(args, "json", False):
        print_json(dict(record))
        return
    if getattr(args, "jsonl", False):
        print(_dumps(dict(record)))
        return
    fields = {k: v for k, v in record.items() if k != block}
    width = max(map(len, fields), default=0)
    for key, value in fields.items():
        print(f"{key.ljust(width)}  {_text(value)}")
    if record.get(block):
        print(f"{block}:\n{redact_text(str(record[block])).rstrip()}")


def print_task(args: argparse.Namespace, task: TaskInfo) -> None:
    """A task a command made or changed: its record with ``--json``, else
    ``TASK_ID STATUS``, and for a task held for approval the approval to decide."""
    from agentq.ledger import TaskStatus

    if getattr(args, "json", False):
        print_json(task.model_dump(mode="json"))
    elif task.status is TaskStatus.AWAITING_APPROVAL and task.approval_id:
        print(f"{task.task_id} {task.status} approval {task.approval_id} "
              f"(agentq approve {task.approval_id} --by NAME)")  # fmt: skip
    else:
        print(f"{task.task_id} {task.status}")


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """``rows`` as aligned columns (header first)."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def emit(
    args: argparse.Namespace,
    name: str,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Print a listing: ``{name: rows, **extra}`` with --json, a line per row
    with --jsonl, else a table of ``columns`` (and ``extra`` as ``key: value``)."""
    if getattr(args, "json", False):
        print_json({name: list(rows), **(extra or {})})
        return
    if getattr(args, "jsonl", False):
        for row in rows:
            print(_dumps(row))
        return
    if rows:
        print(table(rows, columns))
    else:
        print(f"no {name}")
    for key, value in (extra or {}).items():
        if value is not None:
            print(f"{key}: {_cell(value)}")


def age(now: datetime, then: datetime | None) -> float | None:
    """Seconds from ``then`` to ``now`` (``None`` stays ``None``)."""
    return None if then is None else max(0.0, (now - then).total_seconds())
