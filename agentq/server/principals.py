"""Who calls the HTTP API (and the MCP server, and the console): a principal,
the scopes it holds, and the tokens that name it.

:mod:`agentq.server.auth` authenticates requests as principals (its docstring
says what each scope allows); :mod:`agentq.server.tokens_file` reads which
token digest names which principal.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from enum import StrEnum

from starlette.authentication import BaseUser

__all__ = ["ALL_SCOPES", "Principal", "Scope", "hash_token", "new_token"]


class Scope(StrEnum):
    """What a principal may do."""

    READ = "read"
    ENQUEUE = "enqueue"
    APPROVE = "approve"
    OPERATE = "operate"
    ADMIN = "admin"


ALL_SCOPES = frozenset(Scope)


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
