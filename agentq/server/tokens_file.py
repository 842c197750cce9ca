"""The tokens file of ``agentq serve`` (and ``agentq mcp``, ``agentq ui``):
its entries, their checks, and the file's own permissions.

The format is in :mod:`agentq.server.auth`'s docstring. An error names the
entry (``tokens[1]``, its name) and the field, never a value: a token pasted
where its digest goes must not reach stderr, journald or CI logs. A token taken
from an environment variable must be at least :data:`MIN_TOKEN_CHARS`
characters long, and the file is refused when others may write it
(:func:`check_tokens_file`).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentq.errors import ConfigError
from agentq.server.principals import Principal, Scope, hash_token
from agentq.tomlfiles import field_name, read_toml

__all__ = ["MIN_TOKEN_CHARS", "check_token_name", "check_tokens_file", "read_tokens_file"]

#: Shortest token a tokens file may take from an environment variable.
MIN_TOKEN_CHARS = 16

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


def check_tokens_file(file: Path) -> None:
    """Refuse a tokens file others may change (a :class:`ConfigError` naming its
    mode or owner): writable by its group or everyone, or owned by another user
    than this process's (or root). A file that does not exist passes (reading
    it says so). POSIX only."""
    if os.name != "posix":
        return
    try:
        st = file.stat()
    except OSError:
        return
    where = f"tokens file {file}"
    mode = stat.S_IMODE(st.st_mode)
    problems = []
    if mode & 0o022:
        who = " and ".join(w for bit, w in ((0o020, "its group"), (0o002, "everyone"))
                           if mode & bit)  # fmt: skip
        problems.append(f"has mode {mode:04o}: writable by {who} (chmod go-w {file})")
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        problems.append(f"is owned by uid {st.st_uid}{_user(st.st_uid)}, not by this "
                        f"user (uid {me}{_user(me)}) or root")  # fmt: skip
    if problems:
        raise ConfigError(
            f"{where} {'; and '.join(problems)}: whoever may write it may grant any "
            "token any scope, so it is refused (as ssh refuses such an authorized_keys)"
        )


def _user(uid: int) -> str:
    try:
        import pwd

        return f" ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return ""


def _problems(exc: ValidationError, data: object, where: str) -> str:
    """One line per error, naming the entry and the field, never a value (a
    token pasted into the file must not be printed)."""
    entries = data.get("tokens") if isinstance(data, dict) else None
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        problem = error["msg"].removeprefix("Value error, ")
        if error["type"] == "string_pattern_mismatch" and loc[-1:] == ("sha256",):
            problem = "not a SHA-256 digest (64 hex digits; agentq token prints the entry)"
        elif error["type"] == "string_pattern_mismatch":
            problem = "not of the expected form"
        if len(loc) >= 2 and loc[0] == "tokens" and isinstance(loc[1], int):
            entry = f"tokens[{loc[1]}]"
            name = (entries[loc[1]].get("name") if isinstance(entries, list)
                    and loc[1] < len(entries) and isinstance(entries[loc[1]], dict)
                    else None)  # fmt: skip
            if isinstance(name, str) and _NAME.fullmatch(name) and loc[2:] != ("name",):
                entry += f" (name {name!r})"
            field = field_name(loc[2:]) or "the entry"
            lines.append(f"{where}: {entry}: {field}: {problem}")
        else:
            lines.append(f"{where}: {field_name(loc) or 'the file'}: {problem}")
    return "\n".join(lines)


_NAME = re.compile(r"[A-Za-z0-9_.@:-]{1,200}")


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[_TokenEntry] = []


def read_tokens_file(path: str | Path) -> dict[str, Principal]:
    """The principal each token digest of a tokens file names (see
    :mod:`agentq.server.auth`'s docstring for the format); a :class:`ConfigError`
    naming the entry and the field, never a value, if the file is refused."""
    file = Path(path)
    where = f"tokens file {file}"
    check_tokens_file(file)
    data = read_toml(file, "tokens file")
    try:
        parsed = _TokensFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, data, where)) from None
    digests: dict[str, Principal] = {}
    for entry in parsed.tokens:
        digest = entry.digest(where)
        if digest in digests:
            other = digests[digest].name
            raise ConfigError(f"{where}: the token of {entry.name!r} is also {other!r}'s")
        digests[digest] = Principal(entry.name, frozenset(entry.scopes))
    if not digests:
        raise ConfigError(f"{where} names no token: nobody could call the API")
    return digests
