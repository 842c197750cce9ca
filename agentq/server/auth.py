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
``agentq token`` makes 256-bit ones.

Guessing costs: wrong tokens are counted per client address, and past a few the
address is refused (429 with ``Retry-After``) for a back-off that doubles, its
tokens not even checked meanwhile (:mod:`agentq.server.guessing`).

For surfaces mounted into the app (the web console): ``request.user`` is the
:class:`Principal` (or Starlette's ``UnauthenticatedUser``), and
``require(request, Scope.APPROVE)`` returns it or raises the 401/403
:class:`~agentq.server.problems.Problem`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
    BaseUser,
)
from starlette.requests import HTTPConnection
from starlette.responses import Response

from agentq.clock import Clock
from agentq.errors import ConfigError
from agentq.server.guessing import GuessLimiter, retry_after
from agentq.server.problems import Problem, problem_response
from agentq.tomlfiles import read_toml, validation_problems

__all__ = [
    "Authenticator",
    "InsecureLocal",
    "Principal",
    "Scope",
    "TokenAuth",
    "TooManyGuesses",
    "check_token_name",
    "hash_token",
    "is_loopback",
    "new_token",
    "require",
    "require_any",
]


class Scope(StrEnum):
    """What a principal may do."""

    READ = "read"
    ENQUEUE = "enqueue"
    APPROVE = "approve"
    OPERATE = "operate"
    ADMIN = "admin"


ALL_SCOPES = frozenset(Scope)

#: Shortest token a tokens file may take from an environment variable.
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Principal(BaseUser):
    """An authenticated caller: its configured name and scopes."""

    name: str
    scopes: frozenset[Scope] = field(default_factory=frozenset)

    def may(self, scope: Scope) -> bool:
        """Whether it holds ``scope`` (``admin`` implies every scope, ``operate`` ``read``)."""
        if scope in self.scopes or Scope.ADMIN in self.scopes:
            return True
        return scope is Scope.READ and Scope.OPERATE in self.scopes

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def identity(self) -> str:
        return self.name


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token, as the tokens file stores it."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return "aqt_" + secrets.token_urlsafe(32)


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
        file = Path(path)
        where = f"tokens file {file}"
        try:
            parsed = _TokensFile.model_validate(read_toml(file, "tokens file"))
        except ValidationError as exc:
            raise ConfigError(validation_problems(exc, lambda loc: (where, loc))) from exc
        digests: dict[str, Principal] = {}
        for entry in parsed.tokens:
            digest = entry.digest(where)
            if digest in digests:
                other = digests[digest].name
                raise ConfigError(f"{where}: the token of {entry.name!r} is also {other!r}'s")
            digests[digest] = Principal(entry.name, frozenset(entry.scopes))
        if not digests:
            raise ConfigError(f"{where} names no token: nobody could call the API")
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


#: Owners no token may be (:mod:`agentq.server.access`).
_RESERVED_NAMES = frozenset({"local", "agentq"})


class _TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.@:-]+$")
    scopes: list[Scope] = Field(min_length=1)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @model_validator(mode="after")
    def _one_source(self) -> _TokenEntry:
        if self.name in _RESERVED_NAMES:
            # Python callers without by= and --insecure-local are "local", the
            # runtime's own tasks "agentq": a token of either name would own them.
            raise ValueError(f"the name {self.name!r} is reserved")
        if (self.sha256 is None) == (self.env is None):
            raise ValueError("give exactly one of sha256 = ... or env = ...")
        return self

    def digest(self, where: str) -> str:
        if self.sha256 is not None:
            return self.sha256
        assert self.env is not None
        token = (os.environ.get(self.env) or "").strip()
        if not token:
            raise ConfigError(
                f"{where}: token of {self.name!r}: environment variable {self.env} is not set"
            )
        if len(token) < MIN_TOKEN_CHARS:
            # Named by its entry and variable only: the value is a secret, short or not.
            raise ConfigError(
                f"{where}: token of {self.name!r} (environment variable {self.env}) is shorter "
                f"than {MIN_TOKEN_CHARS} characters: too easy to guess; make one with agentq token"
            )
        return hash_token(token)


def check_token_name(name: str) -> None:
    """Refuse ``name`` as the tokens file would (``agentq token`` checks it before
    it makes a token, so it never prints an entry the server refuses)."""
    try:
        _TokenEntry(name=name, scopes=[Scope.READ], sha256="0" * 64)
    except ValidationError as exc:
        problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise ConfigError(f"token name {name!r}: {problems}") from None


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[_TokenEntry] = []

