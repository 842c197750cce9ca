"""The ``spanner://`` URL: what it names and which options it takes.

Plain Python (no google-cloud-spanner import).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from agentq.errors import ConfigError

__all__ = ["DEFAULT_QUIET", "ReceiveShort", "SpannerConfig", "parse_url"]

_PATH = re.compile(r"/?projects/([^/]+)/instances/([^/]+)/databases/([^/]+)")
_OPTIONS = (
    "dialect", "ddl", "endpoint", "database_role", "timeout", "receive_duration", "receive_short",
    "namespace",
)  # fmt: skip
_ROLE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")
#: A prefix of agentq's table and queue names: lower case, so that both dialects
#: (PostgreSQL folds unquoted names) address the same name.
_NAMESPACE = re.compile(r"[a-z][a-z0-9_]{0,39}")
#: Default deadline of one call (seconds); UNAVAILABLE is retried within it.
DEFAULT_TIMEOUT = 30.0
#: Default length of one long-lived RECEIVE (the documents recommend about 20 minutes).
DEFAULT_RECEIVE_DURATION = 1200.0
#: Seconds without a new row after which a short receive that still expects
#: messages (due, but leased by another process) is cancelled.
DEFAULT_QUIET = 2.0


@dataclass(frozen=True)
class ReceiveShort:
    """How a one-shot receive (``stream(..., max_duration=0)``: ``drain()``, the
    heartbeat monitor) is sent (URL option ``receive_short``).

    ``cancel`` (default, ``cancel:SECONDS`` to set the interval): a RECEIVE written
    as the documents write one (``'1m'``), for the messages a read of the queue
    found due, cancelled by the client once they came, or after ``quiet`` seconds
    without a new row. ``0s``: one RECEIVE of ``max_duration=>'0s'``, which
    no document shows (they advise against extremely short durations); for an
    instance where it is seen to lease and return every ready batch.
    """

    zero: bool = False
    quiet: float = DEFAULT_QUIET

    @property
    def text(self) -> str:
        """The option's value as written in a URL."""
        return "0s" if self.zero else f"cancel:{self.quiet:g}"


@dataclass(frozen=True)
class SpannerConfig:
    """A parsed ``spanner://projects/P/instances/I/databases/D?...`` URL."""

    project: str
    instance: str
    database: str
    postgres: bool
    auto_ddl: bool
    endpoint: str | None
    #: Fine-grained access control: the database role sessions are created with.
    database_role: str | None
    #: Deadline of one call, seconds.
    timeout: float
    #: Length of one long-lived RECEIVE of a worker, seconds.
    receive_duration: float
    #: How a one-shot receive is sent.
    receive_short: ReceiveShort
    #: A prefix of the names of agentq's queues and records table in the database.
    namespace: str
    #: The URL without secrets or client-only options, for logs and ``Backend.url``.
    safe_url: str


def parse_url(url: str) -> SpannerConfig:
    """Parse and check a Spanner URL (ConfigError naming the problem)."""
    parts = urlsplit(url)
    match = _PATH.fullmatch(parts.netloc + parts.path)
    if match is None:
        raise ConfigError(
            f"invalid Spanner URL {url!r}: expected spanner://projects/P/instances/I/databases/D"
        )
    project, instance, database = match.groups()
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(query) - set(_OPTIONS)
    if unknown:
        raise ConfigError(
            f"unknown Spanner URL option(s) {sorted(unknown)} (known: {', '.join(_OPTIONS)})"
        )
    dialect = query.get("dialect", "googlesql").lower()
    if dialect not in ("googlesql", "postgresql"):
        raise ConfigError(f"dialect must be googlesql or postgresql, not {dialect!r}")
    postgres = dialect == "postgresql"
    role = query.get("database_role")
    if role is not None and not _ROLE.fullmatch(role):
        raise ConfigError(
            f"database_role {role!r} is not a Spanner role name (a letter, then up to 127 "
            "letters, digits or underscores)"
        )
    namespace = query.get("namespace", "")
    if namespace and not _NAMESPACE.fullmatch(namespace):
        raise ConfigError(
            f"namespace {namespace!r} is not a name prefix: a lower-case letter, then up to "
            "39 lower-case letters, digits or underscores"
        )
    shown = [f"dialect={dialect}"] if postgres else []
    shown += [f"namespace={namespace}"] if namespace else []
    shown += [f"database_role={role}"] if role else []
    safe_url = url.split("?", 1)[0] + ("?" + "&".join(shown) if shown else "")
    return SpannerConfig(
        project=project, instance=instance, database=database, postgres=postgres,
        auto_ddl=query.get("ddl") == "auto", endpoint=query.get("endpoint"),
        database_role=role,
        timeout=_seconds(query, "timeout", DEFAULT_TIMEOUT, low=1.0),
        receive_duration=_seconds(query, "receive_duration", DEFAULT_RECEIVE_DURATION, low=1.0),
        receive_short=_receive_short(query.get("receive_short")), namespace=namespace,
        safe_url=safe_url,
    )  # fmt: skip


def _seconds(query: dict[str, str], name: str, default: float, *, low: float) -> float:
    text = query.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= 86400:  # also refuses nan
        raise ConfigError(f"{name} must be a number of seconds from {low:g} to 86400, not {text!r}")
    return value


def _receive_short(text: str | None) -> ReceiveShort:
    if text is None or text == "cancel":
        return ReceiveShort()
    if text == "0s":
        return ReceiveShort(zero=True)
    if text.startswith("cancel:"):
        try:
            quiet = float(text.removeprefix("cancel:"))
        except ValueError:
            quiet = float("nan")
        if 0.01 <= quiet <= 60:  # also refuses nan
            return ReceiveShort(quiet=quiet)
    raise ConfigError(
        f"receive_short must be cancel, cancel:SECONDS (0.01 to 60) or 0s, not {text!r}"
    )
