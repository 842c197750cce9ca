"""Redaction of credentials carried in URLs, wherever agentq writes text.

Handlers call APIs at URLs such as ``https://user:PASSWORD@api.example.com/v1?api_key=KEY``,
and those URLs come back in exception messages (httpx's ``raise_for_status()``),
in httpx's request log lines and in tracebacks. agentq passes every such text
through :func:`redact_text` before it reaches the ledger's ``error`` field, a
dead-letter entry, a span, a log line or the CLI's output.

What is replaced by ``REDACTED``:

* **userinfo** of a URL with a scheme: ``https://user:pw@host`` becomes
  ``https://user:REDACTED@host``; a lone ``https://TOKEN@host`` (GitHub-style
  tokens travel as the user name) becomes ``https://REDACTED@host``, except in
  a PostgreSQL URL (``postgresql://app@db/shop``), whose user name is a role,
  not a credential;
* the **value of a query or fragment parameter** (after ``?``, ``&``, ``;`` or
  ``#``) whose name looks secret. Names are compared case-insensitively with
  ``-``, ``_`` and ``.`` ignored (``X-Amz-Signature`` is ``xamzsignature``):

  - exactly one of: ``key``, ``sig``, ``auth``, ``authorization``, ``pass``,
    ``pwd``, ``jwt``, ``session``, ``sessionid``;
  - or containing one of: ``token`` (``access_token``, ``refresh_token``,
    ``X-Amz-Security-Token``), ``secret`` (``client_secret``), ``passw``
    (``password``, ``passwd``), ``apikey`` (``api_key``, ``x-api-key``),
    ``accesskey``, ``privatekey``, ``signature`` (``X-Amz-Signature``,
    ``X-Goog-Signature``, ``oauth_signature``), ``credential``
    (``X-Amz-Credential``).

  Left alone on purpose, because they name ordinary data far more often than
  secrets: names merely ending in ``key`` (``idempotency_key``, ``sort_key``),
  ``auth`` as a prefix (``author``), ``code``, ``id`` and ``sid``.

Redaction keeps everything else (host, path, other parameters), so an error
still says which call failed; the replacement contains no quote or backslash,
so redacted JSON stays valid JSON. It is idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

if TYPE_CHECKING:
    import httpx

__all__ = [
    "REDACTED",
    "describe_exception",
    "is_secret_name",
    "redact_data",
    "redact_text",
    "redact_url",
]

REDACTED = "REDACTED"

_EXACT = frozenset(
    {"key", "sig", "auth", "authorization", "pass", "pwd", "jwt", "session", "sessionid"}
)
_CONTAINS = (
    "token",
    "secret",
    "passw",
    "apikey",
    "accesskey",
    "privatekey",
    "signature",
    "credential",
)
_NOT_NAME = re.compile(r"[-_.]")

# scheme://userinfo@ — userinfo stops at the end of the authority ("/", "?", "#"),
# at whitespace and at the quotes and brackets that delimit a URL in prose or reprs.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^\s/?#\"'<>`]*)@")
# name=value after ?, &, ; or #: the value stops where the next parameter (or the URL) does.
_PARAM = re.compile(r"(?P<lead>[?&;#])(?P<name>[^=&;#?\s\"'<>`]+)=(?P<value>[^&;#\s\"'<>`]*)")


def is_secret_name(name: str) -> bool:
    """Whether a query parameter called ``name`` holds a secret (see the module docstring)."""
    normal = _NOT_NAME.sub("", unquote_plus(name).lower())
    return normal in _EXACT or any(part in normal for part in _CONTAINS)


#: Schemes whose lone user name names a database role, never a token.
_USER_IS_A_ROLE = ("postgresql://", "postgres://")


def _userinfo(match: re.Match[str]) -> str:
    info = match["info"]
    if not info or info == REDACTED or info.endswith(":" + REDACTED):
        return match[0]
    user, colon, _password = info.partition(":")
    if colon:
        return f"{match['scheme']}{user}:{REDACTED}@"
    if match["scheme"].lower() in _USER_IS_A_ROLE:
        return match[0]  # postgresql://app@db: a role's name, shown as psql shows it
    return f"{match['scheme']}{REDACTED}@"


def _param(match: re.Match[str]) -> str:
    if not match["value"] or not is_secret_name(match["name"]):
        return match[0]
    return f"{match['lead']}{match['name']}={REDACTED}"


def redact_text(text: str) -> str:
    """``text`` with the userinfo and secret parameters of every URL in it replaced."""
    if "@" in text:
        text = _USERINFO.sub(_userinfo, text)
    if "=" in text:
        text = _PARAM.sub(_param, text)
    return text


def redact_url(url: httpx.URL | str) -> str:
    """One URL (an ``httpx.URL`` or a string), redacted, as a string."""
    return redact_text(str(url))


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` with secrets redacted: how agentq records a failure."""
    return redact_text(f"{type(exc).__name__}: {exc}")


def redact_data(value: Any) -> Any:
    """A copy of a JSON-like value with every string in it redacted (mapping keys too)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {redact_data(k): redact_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v) for v in value]
    return value
