"""Only agentq.lifecycle writes task, approval and payload records (issue 9), deletes
included (issue 14's retention): every other module changes a task's state by
calling it. Read with ast, so a new surface that
writes a status itself fails here, naming the file and line."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "agentq"
WRITES = {"put_record", "replace_records", "insert_record", "delete_record", "update_records"}
OWNED = {"TASKS", "APPROVALS", "PAYLOADS"}


def _writes_of_owned_tables(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in WRITES or not node.args:
            continue
        table = node.args[0]
        if isinstance(table, ast.Attribute) and table.attr in OWNED:
            lines.append(node.lineno)
    return lines


def test_no_module_outside_the_lifecycle_writes_tasks_or_approvals() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if "lifecycle" in path.relative_to(ROOT).parts:
            continue
        for line in _writes_of_owned_tables(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(ROOT.parent)}:{line}")
    assert offenders == []


def test_the_check_sees_a_write() -> None:
    code = "tx.put_record(Tables.TASKS, 'x', {})\ntx.get_record(Tables.TASKS, 'x')"
    assert _writes_of_owned_tables(ast.parse(code)) == [1]


def test_the_check_sees_a_delete() -> None:
    # Retention deletes task and approval records: only agentq.lifecycle.retention may.
    code = "tx.get_record(Tables.TASKS, 'x')\ntx.delete_record(Tables.APPROVALS, 'a')"
    assert _writes_of_owned_tables(ast.parse(code)) == [2]
