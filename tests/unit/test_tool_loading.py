"""Loading tools: helpers beside tools import relatively, an edited tool is loaded
again by the next Runtime, inline tools need no folder."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentq import ConfigError, Runtime, ToolContext, tool

POLICY_FREE = None  # the default policy: no approval rules


def _write(folder: Path, name: str, source: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(source))


def _greeter(folder: Path, greeting: str) -> None:
    _write(folder, "_common.py", f"GREETING = {greeting!r}\n")
    _write(
        folder,
        "greet.py",
        """
        from pydantic import BaseModel

        from agentq import ToolContext, tool

        from ._common import GREETING


        class Who(BaseModel):
            name: str


        @tool(queue="greetings")
        def greet(ctx: ToolContext, args: Who) -> dict:
            return {"text": f"{GREETING}, {args.name}"}
        """,
    )


def _run_greet(folder: Path, **kw: object) -> str:
    with Runtime("sqlite:///:memory:", tools=folder, policies=POLICY_FREE, **kw) as rt:  # type: ignore[arg-type]
        task = rt.enqueue_action("greet", {"name": "Ada"})
        rt.worker(concurrency=1).drain()
        done = rt.task(task.task_id)
        assert done.status == "succeeded", done.error
        return str(done.result["text"])


def test_a_tool_imports_a_helper_beside_it_relatively(tmp_path: Path) -> None:
    _greeter(tmp_path / "tools", "Hello")
    assert _run_greet(tmp_path / "tools") == "Hello, Ada"


def test_a_runtime_built_after_an_edit_runs_the_new_code(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    _greeter(folder, "Hello")
    assert _run_greet(folder) == "Hello, Ada"
    # Same size, same second: bytecode caches keyed on mtime and size cannot tell.
    _greeter(folder, "Howdy")
    assert _run_greet(folder) == "Howdy, Ada"


def test_an_edited_tool_file_is_loaded_again_without_helpers(tmp_path: Path) -> None:
    # No helper module: the edit alone must be seen (Jupyter: edit, build a new Runtime).
    folder = tmp_path / "tools"
    _greeter(folder, "Hello")
    inline = (folder / "greet.py").read_text().replace("from ._common import GREETING", "")
    (folder / "_common.py").unlink()
    (folder / "greet.py").write_text(inline.replace("GREETING", "'Hello'"))
    assert _run_greet(folder) == "Hello, Ada"
    (folder / "greet.py").write_text(inline.replace("GREETING", "'Howdy'"))
    assert _run_greet(folder) == "Howdy, Ada"


def test_an_unchanged_folder_is_not_imported_again_unless_asked(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    _greeter(folder, "Hello")
    _write(folder, "counter.py", "import builtins\nbuiltins.__dict__.setdefault('_aq_n', [])."
           "append(1)\n")  # fmt: skip
    import builtins

    builtins.__dict__.pop("_aq_n", None)
    try:
        Runtime("sqlite:///:memory:", tools=folder).close()
        Runtime("sqlite:///:memory:", tools=folder).close()
        assert builtins.__dict__["_aq_n"] == [1]
        Runtime("sqlite:///:memory:", tools=folder, reload=True).close()
        assert builtins.__dict__["_aq_n"] == [1, 1]
    finally:
        builtins.__dict__.pop("_aq_n", None)


def test_a_running_worker_keeps_the_code_it_was_built_with(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    _greeter(folder, "Hello")
    old = Runtime("sqlite:///:memory:", tools=folder)
    _greeter(folder, "Howdy")
    new = Runtime("sqlite:///:memory:", tools=folder)
    try:
        for rt, expected in ((old, "Hello, Ada"), (new, "Howdy, Ada")):
            task = rt.enqueue_action("greet", {"name": "Ada"})
            rt.worker(concurrency=1).drain()
            assert rt.task(task.task_id).result == {"text": expected}
    finally:
        old.close()
        new.close()


def test_a_helper_imported_lazily_comes_from_the_same_edit(tmp_path: Path) -> None:
    # The handler imports its helper only when it runs, after the file was edited:
    # it still gets the helper as it was when its runtime loaded the folder.
    folder = tmp_path / "tools"
    _greeter(folder, "Hello")
    source = (folder / "greet.py").read_text()
    lazy = source.replace("from ._common import GREETING\n", "").replace(
        '    return {"text"', '    from ._common import GREETING\n\n    return {"text"'
    )
    (folder / "greet.py").write_text(lazy)
    old = Runtime("sqlite:///:memory:", tools=folder)
    try:
        _write(folder, "_common.py", "GREETING = 'Howdy'\n")
        task = old.enqueue_action("greet", {"name": "Ada"})
        old.worker(concurrency=1).drain()
        assert old.task(task.task_id).result == {"text": "Hello, Ada"}
    finally:
        old.close()
    assert _run_greet(folder) == "Howdy, Ada"


def test_two_folders_with_the_same_file_names_do_not_collide(tmp_path: Path) -> None:
    _greeter(tmp_path / "a" / "tools", "Hello")
    _greeter(tmp_path / "b" / "tools", "Bonjour")
    assert _run_greet(tmp_path / "a" / "tools") == "Hello, Ada"
    assert _run_greet(tmp_path / "b" / "tools") == "Bonjour, Ada"


def test_an_absolute_import_of_a_helper_says_to_import_it_relatively(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    _greeter(folder, "Hello")
    source = (folder / "greet.py").read_text().replace("from ._common", "from _common")
    (folder / "greet.py").write_text(source)
    with pytest.raises(ConfigError, match=r"from \._common import"):
        Runtime("sqlite:///:memory:", tools=folder)
    assert "_common" not in sys.modules


def test_a_broken_edit_fails_clearly_and_the_fixed_one_loads(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    _greeter(folder, "Hello")
    _write(folder, "_common.py", "GREETING = (\n")
    with pytest.raises(ConfigError, match="failed to import"):
        Runtime("sqlite:///:memory:", tools=folder)
    _greeter(folder, "Hi")
    assert _run_greet(folder) == "Hi, Ada"


def test_a_tools_package_init_runs_and_subpackages_import(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    _greeter(folder, "Hello")
    _write(folder, "__init__.py", "PACKAGE_INIT_RAN = True\n")
    _write(folder / "_lib", "__init__.py", "")
    _write(folder / "_lib", "words.py", "WORD = 'Salut'\n")
    _write(folder, "_common.py", "from ._lib.words import WORD as GREETING\n")
    assert _run_greet(folder) == "Salut, Ada"


class Echo(BaseModel):
    text: str


@tool(queue="echo")
def echo(ctx: ToolContext, args: Echo) -> dict[str, str]:
    """Say it back."""
    return {"echo": args.text}


def test_inline_tools_and_folders_mix(tmp_path: Path) -> None:
    _greeter(tmp_path / "tools", "Hello")
    with Runtime("sqlite:///:memory:", tools=[echo, tmp_path / "tools"]) as rt:
        assert {"echo", "greet"} <= set(rt.tools.names())
        task = rt.enqueue_action("echo", {"text": "hi"})
        rt.worker(concurrency=1).drain()
        assert rt.task(task.task_id).result == {"echo": "hi"}


def test_an_undecorated_inline_tool_is_a_clear_error() -> None:
    def plain(ctx: ToolContext, args: Echo) -> None: ...

    with pytest.raises(ConfigError, match=r"not decorated with @agentq\.tool"):
        Runtime("sqlite:///:memory:", tools=[plain])


def test_one_inline_tool_needs_no_list_and_garbage_is_a_clear_error() -> None:
    with Runtime("sqlite:///:memory:", tools=echo) as rt:
        assert "echo" in rt.tools.names()
    with pytest.raises(ConfigError, match=r"tools must be a folder.*not int"):
        Runtime("sqlite:///:memory:", tools=42)  # type: ignore[arg-type]


def test_a_tools_file_given_for_its_folder_is_named_as_a_file_not_as_missing(
    tmp_path: Path,
) -> None:
    """``tools="tools/refund.py"`` is a natural slip: the message must say the
    path is a file and what to give instead, not that it does not exist."""
    _greeter(tmp_path / "tools", "hi")
    file = tmp_path / "tools" / "greet.py"
    with pytest.raises(ConfigError) as raised:
        Runtime(f"sqlite:///{tmp_path / 'a.db'}", tools=str(file))
    message = str(raised.value)
    assert "does not exist" not in message
    assert "is a file" in message and str(tmp_path / "tools") in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match="does not exist"):
        Runtime(f"sqlite:///{tmp_path / 'b.db'}", tools=str(tmp_path / "missing"))
