"""The hot-path envelope builder agrees with the envelope model."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from agentq.envelope import TaskEnvelope, envelope_of, envelope_payload
from agentq.executor import _looks_like_envelope

REC = {
    "task_id": "tsk_1", "tool": "execute_refund", "args": {"amount": 5}, "attempt": 3,
    "failures": 1, "throttles": 2, "kind": "action", "ordering_key": "o-1",
    "approval_id": None, "checkpoint": {"done": 2}, "trace": {"traceparent": "00-x"},
    "created_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
}  # fmt: skip


def test_envelope_payload_validates_and_round_trips() -> None:
    payload = envelope_payload(REC)
    model = TaskEnvelope.model_validate(payload)
    assert model == envelope_of(REC)
    dumped = model.model_dump(mode="json", exclude_unset=True)
    assert datetime.fromisoformat(dumped.pop("enqueued_at")) == datetime.fromisoformat(
        payload.pop("enqueued_at")
    )
    assert dumped == payload


def test_structural_check_accepts_only_a_matching_envelope() -> None:
    payload = envelope_payload(REC)
    assert _looks_like_envelope(payload, ("tsk_1", 3))
    assert not _looks_like_envelope(payload, ("tsk_1", 2))
    assert not _looks_like_envelope(payload | {"v": 3}, ("tsk_1", 3))
    # A v1 envelope (it carried the arguments) is still one, with its arguments.
    v1 = payload | {"v": 1, "args": {"amount": 5}}
    assert _looks_like_envelope(v1, ("tsk_1", 3))
    assert not _looks_like_envelope(v1 | {"args": "x"}, ("tsk_1", 3))
    assert not _looks_like_envelope({"tool": 42}, ("tsk_1", 3))
    assert not _looks_like_envelope(b"raw", ("tsk_1", 3))


def test_the_envelope_carries_no_arguments_only_a_reference_when_kept_out_of_band() -> None:
    payload = envelope_payload(REC)
    assert "args" not in payload and "checkpoint" not in payload
    ref = {"bytes": 9000, "sha256": "ab" * 32}
    offloaded = envelope_payload({k: v for k, v in REC.items() if k != "args"} | {"args_ref": ref})
    assert offloaded["args_ref"] == ref
    assert TaskEnvelope.model_validate(offloaded).args_ref == ref
    assert len(json.dumps(offloaded)) < 1024  # whatever the size of the arguments
