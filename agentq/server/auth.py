"""Who may call the HTTP API: bearer tokens with scopes, and the principal.

Every request is authenticated by Starlette's ``AuthenticationMiddleware``
with the app's :class:`Authenticator`; routes then call :func:`require` with
the scope they need. Scopes:

* ``read`` — the principal's own tasks and durable runs (and their approvals
  and events), the OpenAPI document;
* ``enqueue`` — ``POST /v1/tools/{tool}/actions``, starting runs (``POST
  /v1/runs``) and writing their next messages, and cancelling its own tasks and
  runs;
* ``approve`` — read, approve or reject the approvals it may decide; the
  decision records the principal's name (never a name the caller typed);
* ``operate`` — for the humans who run the queue: read and cancel everyone's
  tasks and runs, read every approval (it implies ``read``, not ``enqueue`` or
  ``approve``);
* ``admin`` — everything (it implies the others).

Who may see and change *which* task is :mod:`agentq.server.access`; docs/explanations/security.md
has the table.

No token, no access: a request without a valid ``Authorization: Bearer …``
header gets 401. The only exception is :class:`InsecureLocal` (``agentq serve
--insecure-local``): for development, every request *from a loopback address*
is the principal ``local`` with every scope; ``agentq serve`` refuses it on a
non-loopback address.

Tokens come from configuration (:meth:`TokenAuth.from_file`)::

    # tokens.toml
    [[tokens]]
    name = "refund-agent"          # the principal
    scopes = ["enqueue", "read"]
    sha256 = "<hex digest>"        # of the token (agentq token prints both)

    [[tokens]]
    name = "alice"
    scopes = ["approve", "read"]
    env = "AGENTQ_TOKEN_ALICE"     # or: the token is in this environment variable

Only digests are kept in memory and compared; a token never reaches a log. A
token taken from an environment variable must be at least
:data:`MIN_TOKEN_CHARS` characters long (the file is refused otherwise, naming
the entry, never the value); a digest cannot tell its token's length, so
``agentq token`` makes 256-bit ones. An error in the file names the entry
(``tokens[1]``, its name) and the field, never a value: a token pasted where
its digest goes must not reach stderr, journald or CI logs.

Whoever may write the tokens file may grant themselves any scope, so, as ssh
with an ``authorized_keys``, the file is refused (served or appended to) when
its group or everyone may write it, or when it is owned by another user than
the one reading it (or root) (:func:`check_tokens_file`). Readable by all is
fine: it holds digests only.

Guessing costs: wrong tokens are counted per client address, and past a few the
address is refused (429 with ``Retry-After``) for a back-off that doubles, its
tokens not even checked meanwhile (:mod:`agentq.server.guessing`).

For surfaces mounted into the app (the web console): ``request.user`` is the
:class:`Principal` (or Starlette's ``UnauthenticatedUser``), and
``require(request, Scope.APPROVE)`` returns it or raises the 401/403
:class:`~agentq.server.problems.Problem`.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from pathlib import Path

from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
)
from starlette.requests import HTTPConnection
from starlette.responses import Response

from agentq.clock import Clock
from agentq.server.guessing import GuessLimiter, retry_after
from agentq.server.principals import ALL_SCOPES, Principal, Scope, hash_token, new_token
from agentq.server.problems import Problem, problem_response
from agentq.server.tokens_file import (
    MIN_TOKEN_CHARS,
    check_token_name,
    check_tokens_file,
    read_tokens_file,
)

__all__ = [
    "ALL_SCOPES",
    "MIN_TOKEN_CHARS",
    "Authenticator",
    "InsecureLocal",
    "Principal",
    "Scope",
    "TokenAuth",
    "TooManyGuesses",
    "check_token_name",
    "check_tokens_file",
    "hash_token",
    "is_loopback",
    "new_token",
    "require",
    "require_any",
]


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Authenticator(AuthenticationBackend):
    """Base of the app's authenticators (a Starlette authentication backend)."""

    #: Whether it may only serve loopback clients (checked by ``agentq serve``).
    loopback_only = False


def _credentials(principal: Principal) -> tuple[AuthCredentials, Principal]:
    scopes = frozenset(s for s in ALL_SCOPES if principal.may(s))
    return AuthCredentials(sorted(scopes)), principal


class TooManyGuesses(AuthenticationError):
    """Too many wrong tokens from this client address: wait ``retry_after`` seconds."""

    def __init__(self, wait: float) -> None:
        self.retry_after = retry_after(wait)
        super().__init__(
            f"too many wrong tokens from this address: retry in {self.retry_after} s"
        )


class TokenAuth(Authenticator):
    """Bearer tokens, each naming a principal. Wrong tokens are counted per
    client address by ``guesses`` (default: a :class:`GuessLimiter` on the real
    clock, or on ``clock``)."""

    def __init__(
        self,
        digests: Mapping[str, Principal],
        *,
        guesses: GuessLimiter | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._digests = dict(digests)
        self.guesses = guesses or GuessLimiter(clock=clock)

    @classmethod
    def from_tokens(
        cls, tokens: Mapping[str, Principal], *, clock: Clock | None = None
    ) -> TokenAuth:
        """From plain tokens (tests, or tokens read from a secret store)."""
        return cls({hash_token(t): p for t, p in tokens.items()}, clock=clock)

    @classmethod
    def from_file(cls, path: str | Path, *, clock: Clock | None = None) -> TokenAuth:
        """From a tokens TOML file (see the module docstring); ``clock`` times the
        back-off of wrong tokens (tests pass a fake one)."""
        digests = read_tokens_file(path)
        return cls(digests, clock=clock)

    async def authenticate(
        self, conn: HTTPConnection
    ) -> tuple[AuthCredentials, Principal] | None:
        header = conn.headers.get("authorization")
        if header is None:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("use Authorization: Bearer <token>")
        client = conn.client.host if conn.client else None
        wait = self.guesses.wait_for(client)
        if wait > 0:
            # Not checked at all while locked out: a right guess gains nothing.
            raise TooManyGuesses(wait)
        digest = hash_token(token.strip())
        for known, principal in self._digests.items():
            if hmac.compare_digest(known, digest):
                return _credentials(principal)
        self.guesses.failed(client)
        raise AuthenticationError("unknown token")


class InsecureLocal(Authenticator):
    """Development only: every loopback client is ``local`` with every scope."""

    loopback_only = True
    principal = Principal("local", ALL_SCOPES)

    async def authenticate(
        self, conn: HTTPConnection
    ) -> tuple[AuthCredentials, Principal] | None:
        client = conn.client.host if conn.client else None
        if not is_loopback(client):
            raise AuthenticationError("--insecure-local serves loopback clients only")
        return _credentials(self.principal)


def require(conn: HTTPConnection, scope: Scope) -> Principal:
    """The request's principal if it has ``scope``; a 401 or 403 Problem otherwise."""
    user = conn.scope.get("user")
    if not isinstance(user, Principal):
        raise Problem(401, "Authentication required", "send Authorization: Bearer <token>",
                      headers={"WWW-Authenticate": 'Bearer realm="agentq"'})  # fmt: skip
    if not user.may(scope):
        raise Problem(
            403, "Insufficient scope", f"{user.name!r} lacks the {scope.value!r} scope",
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'},
        )
    return user


def require_any(conn: HTTPConnection, *scopes: Scope) -> Principal:
    """The request's principal if it has one of ``scopes``; 401 or 403 otherwise
    (the 403 names the first)."""
    user = conn.scope.get("user")
    if isinstance(user, Principal) and any(user.may(s) for s in scopes):
        return user
    return require(conn, scopes[0])


def auth_failed(conn: HTTPConnection, exc: AuthenticationError) -> Response:
    """``on_error`` of the middleware: a bad token is a 401 problem; an address
    locked out after too many wrong tokens gets 429 with ``Retry-After``."""
    if isinstance(exc, TooManyGuesses):
        return problem_response(Problem(
            429, "Too many wrong tokens", str(exc), headers={"Retry-After": exc.retry_after},
        ))  # fmt: skip
    return problem_response(Problem(
        401, "Authentication failed", str(exc),
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    ))  # fmt: skip
