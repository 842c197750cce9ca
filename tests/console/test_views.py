"""What the console's pages show, without a server: redaction, masking of
secret-named values, trace ids."""

from __future__ import annotations

from tests.console._need import need_ui

need_ui()

from agentq.console import views  # noqa: E402


def test_values_of_secret_named_keys_are_masked_and_urls_redacted() -> None:
    shown = views.shown(
        {"api_key": "k-1", "nested": [{"password": "pw", "note": "https://u:p4ss@h.example/"}],
         "order": "o-1", "idempotency_key": "kept"}
    )  # fmt: skip
    assert shown == {
        "api_key": "REDACTED",
        "nested": [{"password": "REDACTED", "note": "https://u:REDACTED@h.example/"}],
        "order": "o-1",
        "idempotency_key": "kept",
    }
    assert "k-1" not in views.pretty({"token": "k-1"})


def test_compact_cuts_long_values() -> None:
    text = views.compact({"ref": "x" * 500})
    assert len(text) == 120 and text.endswith("…")


def test_the_trace_id_is_read_from_the_traceparent() -> None:
    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert views.trace_id({"trace": {"traceparent": f"00-{tid}-00f067aa0ba902b7-01"}}) == tid
    assert views.trace_id({"trace": {}}) is None
    assert views.trace_id({"trace": {"traceparent": "garbage"}}) is None
    assert views.trace_id({"trace": {"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"}}) is None
    assert views.trace_id({}) is None
