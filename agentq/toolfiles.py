"""Loading a tools folder: a private package per folder, fresh code after every edit.

A tools folder is content, not an installed package, so the loader makes it one:
the folder becomes a package with a private, path-derived name (two projects'
``tools/refunds.py`` never collide in ``sys.modules``), and every ``*.py`` in it
is one of its modules. So a tool imports the helpers beside it *relatively*::

    tools/
        _common.py          # helpers: any name starting with "_" is not scanned for tools
        refunds.py          # from ._common import post_json

Relative imports are the one supported form: ``import _common`` would need the
folder on ``sys.path``, where every project's ``_common`` would be the same
module. A ``tools/__init__.py``, if present, runs as the package's own module.

**Edits are picked up.** Loading a folder fingerprints the content of its Python
files; when it changed since the last load in this process (or ``reload=True``),
the whole folder is imported again under a new package name, so a tool and the
helpers it imports always come from the same edit: each load keeps the sources it
fingerprinted, and its modules are compiled from those, even a helper a handler
imports lazily later. Code already loaded is left alone: a worker that is running
keeps the handlers it was built with until it is rebuilt (``agentq worker`` is
restarted to deploy, never swapped under a task). Nothing is read from
``__pycache__``, whose timestamps cannot tell two edits within one second apart.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType

from agentq.errors import ConfigError

__all__ = ["load_tool_modules"]

_PREFIX = "_agentq_tools_"


@dataclass(frozen=True)
class _Loaded:
    fingerprint: str
    package: str
    modules: tuple[ModuleType, ...]


_lock = threading.RLock()
_loaded: dict[Path, _Loaded] = {}  # resolved folder -> its latest load
_folders: dict[str, Path] = {}  # package name -> folder
_snapshots: dict[str, dict[str, bytes]] = {}  # package name -> source path -> its bytes
_versions = itertools.count(1)


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles the source its package's load fingerprinted (the file as it was
    then), never anything from (or to) ``__pycache__``."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        snapshot = _snapshots.get(fullname.partition(".")[0], {})
        source = snapshot.get(path)
        if source is None:  # a file added after the load: as it is now
            source = self.get_data(path)
        return compile(source, path, "exec", dont_inherit=True)


class _ToolsFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of the tools packages this loader made, in their folders."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        top, _, rest = fullname.partition(".")
        folder = _folders.get(top)
        if folder is None or not rest:
            return None
        base = folder.joinpath(*rest.split("."))
        init = base / "__init__.py"
        if init.is_file():
            return importlib.util.spec_from_file_location(
                fullname, init, loader=_SourceLoader(fullname, str(init)),
                submodule_search_locations=[str(base)],
            )  # fmt: skip
        file = base.with_name(base.name + ".py")
        if file.is_file():
            return importlib.util.spec_from_file_location(
                fullname, file, loader=_SourceLoader(fullname, str(file))
            )
        return None


_finder = _ToolsFinder()


def _install_finder() -> None:
    if _finder not in sys.meta_path:
        # First: the standard path finder would read stale bytecode from __pycache__.
        sys.meta_path.insert(0, _finder)


def _sources(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*.py")
        if "__pycache__" not in p.parts and not any(s.startswith(".") for s in p.parts)
    )  # fmt: skip


def _fingerprint(folder: Path) -> tuple[str, dict[str, bytes]]:
    """A digest of the folder's Python sources, and the sources it was made of."""
    digest = hashlib.sha256()
    snapshot: dict[str, bytes] = {}
    for file in _sources(folder):
        source = file.read_bytes()
        snapshot[str(file)] = source
        digest.update(str(file.relative_to(folder)).encode() + b"\0")
        digest.update(source + b"\0")
    return digest.hexdigest(), snapshot


def tool_files(folder: Path) -> list[Path]:
    """The files scanned for tools: ``*.py`` directly in the folder, not ``_*``."""
    return [p for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]


def load_tool_modules(folder: str | Path, *, reload: bool = False) -> tuple[ModuleType, ...]:
    """Import the tool modules of ``folder`` (see the module docstring): the cached
    modules when nothing changed since the last load, else (or with ``reload``) a
    fresh import of the whole folder."""
    root = Path(folder)
    if root.is_file():
        raise ConfigError(
            f"tools directory {str(root)!r} is a file: give the folder that holds it "
            f"({str(root.parent)!r}); every *.py directly in it is loaded"
        )
    if not root.is_dir():
        raise ConfigError(f"tools directory {str(root)!r} does not exist")
    root = root.resolve()
    with _lock:
        fingerprint, snapshot = _fingerprint(root)
        previous = _loaded.get(root)
        if previous is not None and previous.fingerprint == fingerprint and not reload:
            return previous.modules
        digest = hashlib.sha1(str(root).encode()).hexdigest()[:12]
        package = f"{_PREFIX}{digest}_v{next(_versions)}"
        _install_finder()
        _folders[package] = root
        _snapshots[package] = snapshot
        try:
            _make_package(package, root)
            modules = tuple(_import(package, root, f) for f in tool_files(root))
        except BaseException:
            _forget(package)
            raise
        _loaded[root] = _Loaded(fingerprint, package, modules)
        return modules


def _make_package(package: str, root: Path) -> None:
    init = root / "__init__.py"
    if init.is_file():
        spec = importlib.util.spec_from_file_location(
            package, init, loader=_SourceLoader(package, str(init)),
            submodule_search_locations=[str(root)],
        )  # fmt: skip
    else:
        spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
        spec.submodule_search_locations = [str(root)]
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    if spec.loader is not None:
        _run(spec.loader, module, init)


def _import(package: str, root: Path, file: Path) -> ModuleType:
    name = f"{package}.{file.stem}"
    if name in sys.modules:  # a sibling tool module imported it already
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, file, loader=_SourceLoader(name, str(file))
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _run(spec.loader, module, file)
    return module


def _run(loader: importlib.abc.Loader, module: ModuleType, file: Path) -> None:
    try:
        loader.exec_module(module)
    except ModuleNotFoundError as exc:
        hint = ""
        missing = (exc.name or "").rpartition(".")[2]
        if missing and (
            (file.parent / f"{missing}.py").is_file() or (file.parent / missing).is_dir()
        ):
            hint = f" (a module beside the tools is imported relatively: from .{missing} import …)"
        raise ConfigError(f"tool module {file} failed to import: {exc}{hint}") from exc
    except Exception as exc:
        raise ConfigError(f"tool module {file} failed to import: {exc}") from exc


def _forget(package: str) -> None:
    """Drop a failed load's modules, so the next load starts clean."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]
    _folders.pop(package, None)
    _snapshots.pop(package, None)
