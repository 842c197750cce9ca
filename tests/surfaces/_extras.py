"""Skipping a surface's tests when its optional extra is absent, except in CI."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``; without it, skip (naming the extra), or fail when ``CI`` is
    set: CI installs every extra, so an absent one is a broken install line."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    why = f"{module} (pip install 'agentq-runtime[{extra}]') missing"
    return pytest.importorskip(module, reason=why)
