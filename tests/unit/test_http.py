"""The handler HTTP client: idempotency key, host policy, in-place retries, Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from agentq import FakeClock, PolicyViolation, RetryLater
from agentq.http import host_allowed, tool_http_client


def client(handler, clock: FakeClock | None = None, hosts=("api.example.com",)) -> httpx.Client:
    return tool_http_client(
        tool="t", task_id="tsk_1", allowed_hosts=hosts, clock=clock or FakeClock(),
        transport=httpx.MockTransport(handler),
    )  # fmt: skip


def test_every_request_carries_the_task_id_as_idempotency_key() -> None:
    seen = []
    c = client(lambda r: (seen.append(r.headers.get("Idempotency-Key")), httpx.Response(200))[1])
    c.post("https://api.example.com/a", json={})
    c.get("https://api.example.com/b", headers={"Idempotency-Key": "forged-by-agent"})
    assert seen == ["tsk_1", "tsk_1"]


@pytest.mark.parametrize(
    "url",
    ["https://evil.example.com/x", "https://api.example.com.evil.net/", "file:///etc/passwd",
     "https://127.0.0.1/"],
)  # fmt: skip
def test_hosts_outside_the_policy_are_refused_before_any_request(url: str) -> None:
    calls = []
    c = client(lambda r: (calls.append(r), httpx.Response(200))[1])
    with pytest.raises((PolicyViolation, httpx.UnsupportedProtocol)):
        c.get(url)
    assert calls == []


def test_wildcard_hosts() -> None:
    assert host_allowed("a.example.com", ["*.example.com"])
    assert not host_allowed("example.com", ["*.example.com"])
    assert not host_allowed("badexample.com", ["*.example.com"])
    assert host_allowed("API.Example.com", ["api.example.com"])


def test_transient_502_is_retried_in_place() -> None:
    answers = iter([httpx.Response(502), httpx.Response(502), httpx.Response(200, json={"ok": 1})])
    clock = FakeClock(auto_advance=True)
    c = client(lambda r: next(answers), clock)
    assert c.get("https://api.example.com/").json() == {"ok": 1}
    assert clock.slept == pytest.approx(0.1 + 0.2)  # exponential backoff on the injected clock


def test_connect_errors_are_retried_then_raised() -> None:
    calls = []

    def fail(r: httpx.Request) -> httpx.Response:
        calls.append(r)
        raise httpx.ConnectError("refused", request=r)

    with pytest.raises(httpx.ConnectError):
        client(fail, FakeClock(auto_advance=True)).get("https://api.example.com/")
    assert len(calls) == 3


def test_429_becomes_retry_later_with_retry_after_seconds() -> None:
    c = client(lambda r: httpx.Response(429, headers={"Retry-After": "17"}))
    with pytest.raises(RetryLater) as info:
        c.get("https://api.example.com/")
    assert info.value.after == 17


def test_503_retry_after_as_http_date() -> None:
    clock = FakeClock()
    when = clock.now() + timedelta(seconds=120)
    header = when.strftime("%a, %d %b %Y %H:%M:%S GMT")
    c = client(lambda r: httpx.Response(503, headers={"Retry-After": header}), clock)
    with pytest.raises(RetryLater) as info:
        c.get("https://api.example.com/")
    assert info.value.after == 120


def test_checked_classifies_api_answers() -> None:
    from agentq import PermanentError
    from agentq.http import checked

    ok = httpx.Response(200, json={"a": 1})
    assert checked(ok, "api") is ok
    with pytest.raises(RuntimeError, match="api failed with 500"):
        checked(httpx.Response(500), "api")
    with pytest.raises(PermanentError, match="api refused: 422"):
        checked(httpx.Response(422, text="bad amount"), "api")


def retry_after_of(header: str, clock: FakeClock | None = None) -> float:
    c = client(lambda r: httpx.Response(429, headers={"Retry-After": header}), clock)
    with pytest.raises(RetryLater) as info:
        c.get("https://api.example.com/")
    return info.value.after


def test_retry_after_http_date_in_the_past_means_now() -> None:
    clock = FakeClock()
    past = (clock.now() - timedelta(days=2)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert retry_after_of(past, clock) == 0


def test_retry_after_http_date_is_relative_to_the_injected_clock() -> None:
    clock = FakeClock()
    header = "Fri, 31 Dec 9999 23:59:59 GMT"
    expected = (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - clock.now()).total_seconds()
    assert retry_after_of(header, clock) == expected
    # "-0000" (no zone information) parses to a naive time: it is read as GMT.
    assert retry_after_of("Fri, 31 Dec 9999 23:59:59 -0000", clock) == expected


@pytest.mark.parametrize(
    "header", ["soon", "-5", "inf", "nan", "1e9", "0x10", "", "Fri, 99 Foo 2026 25:61:00 GMT"]
)
def test_garbage_retry_after_means_the_default_delay(header: str) -> None:
    assert retry_after_of(header) == 1.0  # the throttle default, as without the header


def test_retry_after_with_many_digits_is_kept_for_the_cap_to_judge() -> None:
    assert retry_after_of("99999999999999999999") == 1e20


def test_retry_later_refuses_nan() -> None:
    with pytest.raises(ValueError, match="nan"):
        RetryLater(float("nan"))
