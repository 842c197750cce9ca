"""The stand-in imports nothing from agentq (issue 29).

A stand-in that took its lease length, backoff or batch model from agentq's
modules would agree with agentq's mistakes instead of finding them (it imported
``LEASE_SECONDS`` and ``RedeliveryPolicy``, and the fake clock hid defect 1).
The test modules beside it (``test_*.py``) use agentq, as tests of agentq do.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: What the stand-in may import from agentq: the public backend contract it
#: serves. It needs none of it today; a name added here must be part of that
#: contract (a type the backend returns), never a model of Spanner's behaviour.
ALLOWED: frozenset[str] = frozenset()


def _standin_modules() -> list[Path]:
    return sorted(p for p in HERE.glob("*.py") if not p.name.startswith("test_"))


def _agentq_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "agentq"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "agentq":
            found += [f"{node.module}.{a.name}" for a in node.names]
    return found


def test_no_stand_in_module_imports_agentq() -> None:
    modules = _standin_modules()
    assert {p.name for p in modules} >= {"interposer.py", "leases.py", "queue_sql.py"}
    imports = {p.name: _agentq_imports(p) for p in modules}
    offending = {name: [i for i in found if i not in ALLOWED] for name, found in imports.items()}
    assert not any(offending.values()), f"the stand-in imports agentq: {offending}"


def test_importing_the_stand_in_loads_no_agentq_module() -> None:
    """Also indirectly: importing every stand-in module loads no ``agentq`` module."""
    names = [f"tests.spanner_emulator.{p.stem}" for p in _standin_modules()]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'agentq'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
