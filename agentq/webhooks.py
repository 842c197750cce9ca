"""Completion webhooks: a task's outcome POSTed to its ``callback_url``.

A task enqueued with ``callback_url`` (``Runtime.enqueue_action(...,
callback_url=...)``, or the HTTP API's ``callback_url`` field) gets one more
task when it finishes: :data:`WEBHOOK_TOOL`, created by the lifecycle *in the
transaction that records the outcome* (:func:`agentq.lifecycle.tasks.finish`
and its siblings). So a webhook is never sent for an outcome that did not
commit, and never lost once it did: it is an ordinary agentq task, retried
with backoff by any worker, dead-lettered (and replayable) if the receiver
keeps failing.

What the receiver gets (`Standard Webhooks <https://www.standardwebhooks.com/>`_
signing, so its libraries verify it):

* body: JSON ``{"type": "task.<status>", "task": {task_id, tool, status,
  result, error, attempt, finished_at}}``;
* ``Idempotency-Key`` and ``webhook-id``: ``<task_id>:<status>`` — the same on
  every retry and redelivery, so the receiver applies it once;
* ``webhook-timestamp``: Unix seconds; ``webhook-signature``: ``v1,<base64
  HMAC-SHA256(secret, "<webhook-id>.<webhook-timestamp>.<body>")>``.

The secret is the ``webhook_secret`` setting (``[settings]`` of
``agentq.toml``) or the ``AGENTQ_WEBHOOK_SECRET`` environment variable; a
``whsec_`` prefix means base64 (Standard Webhooks' format). Where webhooks may
go is the executor's host allow-list of this tool (``[tools.agentq_webhook]
allowed_hosts`` in a policy file): an agent's ``callback_url`` is untrusted, so
with no such entry no webhook can be sent, and :func:`check_callback_url`
refuses such a URL when the task is created. An entry may name a port
(``hooks.example.com:443``); a name is reached only at public addresses unless
the list names the non-public one (an address, a network, or ``localhost``):
the runtime's transport resolves it once and connects to the address it checked
(:mod:`agentq.policies.hosts`, :mod:`agentq.http_guard`). A URL with userinfo, a query or a
fragment is refused too: a credential in it would reach the ledger.

Only a 2xx answer is a delivery. Redirects are not followed (the allow-list
checked the URL asked for, not the ``Location``), so a 3xx is a failed
delivery, retried like a 5xx and dead-lettered once the attempts run out; any
other 4xx is dead at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from agentq.context import ToolContext
from agentq.errors import InvalidArguments
from agentq.policies.hosts import default_port, host_allowed
from agentq.redact import redact_text
from agentq.retry import PermanentError
from agentq.tools import tool

if TYPE_CHECKING:
    from agentq.policies import Policy

__all__ = [
    "SECRET_ENV",
    "WEBHOOK_QUEUE",
    "WEBHOOK_TOOL",
    "WebhookArgs",
    "check_callback_url",
    "deliver_webhook",
    "sign",
    "webhook_args",
]

WEBHOOK_TOOL = "agentq_webhook"
WEBHOOK_QUEUE = "webhooks"
SECRET_ENV = "AGENTQ_WEBHOOK_SECRET"
_MAX_URL = 2048


class WebhookArgs(BaseModel):
    """One webhook delivery: where, and the finished task it reports."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=_MAX_URL)
    webhook_id: str = Field(max_length=300)
    body: dict[str, Any]


def check_callback_url(url: object, policy: Policy) -> str:
    """The callback URL if webhooks may go there; :class:`InvalidArguments`
    naming ``callback_url`` and the reason otherwise."""
    if not isinstance(url, str) or not url or len(url) > _MAX_URL:
        raise InvalidArguments(f"callback_url must be a URL of at most {_MAX_URL} characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = default_port(parts.scheme, parts.port)
    except ValueError as exc:
        raise InvalidArguments(f"callback_url is not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidArguments("callback_url must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None or redact_text(url) != url:
        raise InvalidArguments(
            "callback_url must not carry credentials (userinfo or a secret query parameter): "
            "webhooks are signed instead"
        )
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise InvalidArguments(
            "callback_url must not have a query or fragment (they could carry credentials "
            "into the ledger): put what the receiver needs in its path"
        )
    allowed = policy.for_tool(WEBHOOK_TOOL).allowed_hosts
    if not host_allowed(host, allowed, port):
        hosts = ", ".join(allowed) or f"none: set [tools.{WEBHOOK_TOOL}] allowed_hosts"
        shown = f"{host}:{port}" if parts.port else host
        raise InvalidArguments(
            f"callback_url host {shown!r} is not allowed for webhooks (allowed: {hosts})"
        )
    return url


def webhook_args(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The webhook task's arguments for a task record that just finished."""
    status = str(rec["status"])
    task = {k: rec.get(k) for k in ("task_id", "tool", "status", "result", "error", "attempt",
                                     "finished_at")}  # fmt: skip
    return WebhookArgs(
        url=str(rec["callback_url"]),
        webhook_id=f"{rec['task_id']}:{status}",
        body={"type": f"task.{status}", "task": task},
    ).model_dump(mode="json")


def _secret_bytes(secret: str) -> bytes:
    if secret.startswith("whsec_"):
        return base64.b64decode(secret.removeprefix("whsec_"))
    return secret.encode()


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value (Standard Webhooks ``v1``)."""
    content = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(_secret_bytes(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


@tool(WEBHOOK_TOOL, queue=WEBHOOK_QUEUE, max_attempts=20, timeout=30, internal=True)
def deliver_webhook(ctx: ToolContext, args: WebhookArgs) -> dict[str, Any]:
    """POST a finished task's outcome to its callback URL, signed (internal)."""
    secret = ctx.settings.get("webhook_secret") or os.environ.get(SECRET_ENV)
    if not secret:
        raise PermanentError(
            f"no webhook secret: set the webhook_secret setting or {SECRET_ENV}"
        )
    from agentq.http import IDEMPOTENCY_HEADER, checked

    body = json.dumps(args.body, separators=(",", ":"), sort_keys=True).encode()
    timestamp = int(ctx.clock.now().timestamp())
    headers = {
        "content-type": "application/json",
        "webhook-id": args.webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(str(secret), args.webhook_id, timestamp, body),
        IDEMPOTENCY_HEADER: args.webhook_id,
    }
    response = checked(ctx.http.post(args.url, content=body, headers=headers), "webhook receiver")
    if 300 <= response.status_code < 400:
        # Redirects are not followed (the allow-list checked this URL, not the
        # Location), so the receiver did not get the outcome: retried, then dead.
        raise RuntimeError(f"webhook receiver answered {response.status_code} (a redirect): "
                           "not delivered; redirects are not followed")  # fmt: skip
    return {"status_code": response.status_code, "webhook_id": args.webhook_id}
