"""The Google Cloud Spanner backend (see :mod:`agentq.backends.spanner.backend`).

``ddl`` and the URL parser are plain Python and import without
google-cloud-spanner; :class:`SpannerBackend` and :func:`open_spanner` load the
client library on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentq.backends.spanner.ddl import ddl

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend
    from agentq.backends.spanner.connect import open_spanner

__all__ = ["SpannerBackend", "ddl", "open_spanner"]

_LAZY = {
    "SpannerBackend": "agentq.backends.spanner.backend",
    "open_spanner": "agentq.backends.spanner.connect",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
