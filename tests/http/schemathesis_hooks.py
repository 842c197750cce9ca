"""schemathesis hooks for tests/http/test_schemathesis.py.

A schema-valid request is a new request: a real client mints a fresh
Idempotency-Key for each one (its retries, which reuse the key, are covered by
tests/http/test_api.py). Without this the generator reuses keys such as "0"
with other bodies, which the API rightly answers 422.
"""

from __future__ import annotations

import uuid
from typing import Any

import schemathesis
from schemathesis.generation.modes import GenerationMode


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    meta = getattr(case, "meta", None)
    positive = meta is None or meta.generation.mode == GenerationMode.POSITIVE
    if positive and case.headers and "Idempotency-Key" in case.headers:
        case.headers["Idempotency-Key"] = uuid.uuid4().hex
