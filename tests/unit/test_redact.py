"""Redaction of URL credentials in arbitrary text (defect 13)."""

from __future__ import annotations

import json

import httpx
import pytest

from agentq.redact import (
    describe_exception,
    is_secret_name,
    redact_data,
    redact_text,
    redact_url,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GET http://u:pw@h/x", "GET http://u:REDACTED@h/x"),
        ("https://ghp_abc@github.com/o/r.git", "https://REDACTED@github.com/o/r.git"),
        ("url 'https://h/v1?api_key=K&order=7'", "url 'https://h/v1?api_key=REDACTED&order=7'"),
        ("https://h/?a=1&ApiKey=K", "https://h/?a=1&ApiKey=REDACTED"),
        ("https://h/?key=K", "https://h/?key=REDACTED"),
        ("https://h/?TOKEN=T;x=1", "https://h/?TOKEN=REDACTED;x=1"),
        ("https://h/cb#access_token=T&type=bearer", "https://h/cb#access_token=REDACTED&type=bearer"),
        ("s3 https://b.s3/o?X-Amz-Credential=C&X-Amz-Signature=S",
         "s3 https://b.s3/o?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED"),
        ("https://a.blob/c?sv=2020&sig=S%2B", "https://a.blob/c?sv=2020&sig=REDACTED"),
        ("postgres://app:hunter2@db:5432/x?password=p", "postgres://app:REDACTED@db:5432/x?password=REDACTED"),
        # A database URL's user name alone is no secret (issue 39, 2.12): only passwords are.
        ("postgresql://app@db/shop?schema=x", "postgresql://app@db/shop?schema=x"),
        ("agentq worker on postgres://agentq_ci@127.0.0.1:54329/db",
         "agentq worker on postgres://agentq_ci@127.0.0.1:54329/db"),
        # Nothing secret: unchanged.
        ("https://h/x?order=7&idempotency_key=k&author=me", "https://h/x?order=7&idempotency_key=k&author=me"),
        ("mail bob@example.com about http://h/a", "mail bob@example.com about http://h/a"),
        ("https://h/?token=", "https://h/?token="),
    ],
)  # fmt: skip
def test_urls_in_text_are_redacted(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert redact_text(expected) == expected  # idempotent


@pytest.mark.parametrize(
    "name",
    ["api_key", "apikey", "API-KEY", "x-api-key", "key", "token", "access_token", "refresh_token",
     "password", "passwd", "secret", "client_secret", "signature", "sig", "auth", "authorization",
     "credential", "X-Amz-Signature", "X-Amz-Security-Token", "X-Goog-Credential", "jwt",
     "api%5Fkey"],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["order", "id", "author", "sort_key", "idempotency_key", "code"])
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_httpx_urls_and_exceptions() -> None:
    url = httpx.URL("http://u:pw@127.0.0.1:9/p", params={"api_key": "K", "n": "1"})
    assert redact_url(url) == "http://u:REDACTED@127.0.0.1:9/p?api_key=REDACTED&n=1"
    request = httpx.Request("GET", url)
    response = httpx.Response(500, request=request)
    with pytest.raises(httpx.HTTPStatusError) as info:
        response.raise_for_status()
    described = describe_exception(info.value)
    assert described.startswith("HTTPStatusError: Server error '500 Internal Server Error'")
    assert ":pw@" not in described and "=K" not in described
    assert "'http://u:REDACTED@127.0.0.1:9/p?api_key=REDACTED&n=1'" in described


def test_redacted_json_stays_valid_and_data_is_walked() -> None:
    record = {"error": "for url 'http://u:pw@h/?token=T'", "n": 1, "l": ["https://h/?sig=S"]}
    assert json.loads(redact_text(json.dumps(record))) == redact_data(record)
    assert redact_data(record) == {
        "error": "for url 'http://u:REDACTED@h/?token=REDACTED'", "n": 1,
        "l": ["https://h/?sig=REDACTED"],
    }  # fmt: skip


def test_checked_errors_do_not_echo_credentials_from_the_body() -> None:
    from agentq.http import checked
    from agentq.retry import PermanentError

    body = "bad request for /v1?api_key=K-123 from http://u:pw-123@h"
    with pytest.raises(PermanentError) as info:
        checked(httpx.Response(400, text=body), "payments API")
    assert "K-123" not in str(info.value) and "pw-123" not in str(info.value)
    assert str(info.value).startswith("payments API refused: 400 bad request")
