"""The console's tests need the ``ui`` extra: skipped without it locally, a
failure when ``CI`` is set (``.ci/run`` installs it)."""

from __future__ import annotations

import importlib.util
import os

import pytest

UI_MODULES = ("starlette", "jinja2", "uvicorn", "multipart")


def need_ui() -> None:
    """Skip the calling test module (fail it under CI) if the ``ui`` extra is absent."""
    missing = [m for m in UI_MODULES if importlib.util.find_spec(m) is None]
    if not missing:
        return
    why = f"the console needs the 'ui' extra (pip install -e '.[ui]'): no {', '.join(missing)}"
    if os.environ.get("CI"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why, allow_module_level=True)
