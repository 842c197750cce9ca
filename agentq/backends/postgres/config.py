"""The ``postgresql://`` URL: what it names and which options are agentq's own.

Plain Python (no psycopg import). agentq's options (``schema``, ``pool_size``,
``pool_timeout``, ``poll_interval``, ``pooler``, ``lease_seconds``) are taken out of the query;
everything else (``sslmode``, ``application_name``, ``connect_timeout``, ...) is
libpq's and goes to the server connection as it is.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from urllib.parse import SplitResult, parse_qsl, quote, urlencode, urlsplit, urlunsplit

from agentq.backends.queue_values import LEASE_SECONDS, lease_seconds_option
from agentq.errors import ConfigError
from agentq.redact import REDACTED, is_secret_name, redact_text

__all__ = ["DEFAULT_SCHEMA", "POOLERS", "PostgresConfig", "parse_url"]

DEFAULT_SCHEMA = "agentq"
_OWN_OPTIONS = ("schema", "pool_size", "pool_timeout", "poll_interval", "pooler", "lease_seconds")
#: ``pooler=``: what sits between agentq and the server. ``session``: the server
#: itself, or a pooler that gives each client one server connection for its whole
#: session. ``transaction``: a pooler that may hand each transaction another server
#: connection (PgBouncer's pool_mode = transaction, Supavisor's transaction mode).
POOLERS = ("session", "transaction")
#: The connection keywords of libpq 18 (``PQconndefaults``), which a URL may
#: give as query parameters. A parameter that is neither one of these nor
#: agentq's own but close to one is refused with a suggestion (``pool_sise``);
#: one close to none goes to libpq as it is (a keyword of a later libpq works,
#: and libpq names one it does not know).
LIBPQ_KEYWORDS = (
    "application_name", "channel_binding", "client_encoding", "connect_timeout", "dbname",
    "fallback_application_name", "gssdelegation", "gssencmode", "gsslib", "host", "hostaddr",
    "keepalives", "keepalives_count", "keepalives_idle", "keepalives_interval", "krbsrvname",
    "load_balance_hosts", "max_protocol_version", "min_protocol_version", "oauth_client_id",
    "oauth_client_secret", "oauth_issuer", "oauth_scope", "options", "passfile", "password",
    "port", "replication", "require_auth", "requirepeer", "scram_client_key",
    "scram_server_key", "service", "ssl_max_protocol_version", "ssl_min_protocol_version",
    "sslcert", "sslcertmode", "sslcompression", "sslcrl", "sslcrldir", "sslkey",
    "sslkeylogfile", "sslmode", "sslnegotiation", "sslpassword", "sslrootcert", "sslsni",
    "target_session_attrs", "tcp_user_timeout", "user",
)  # fmt: skip
# A lowercase identifier: unquoted, it means the same in every tool (psql, an ORM).
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class PostgresConfig:
    """A parsed ``postgresql://user:password@host:port/database?...`` URL."""

    #: What libpq connects with (agentq's own options removed; secrets kept: never
    #: shown, not even in this object's ``repr``).
    conninfo: str = field(repr=False)
    #: The schema of agentq's tables (records, queues, the schema version).
    schema: str
    #: Most connections the backend's pool opens.
    pool_size: int
    #: Seconds a transaction waits for a free pooled connection.
    pool_timeout: float
    #: Seconds between a waiting receiver's re-reads when no notification came.
    poll_interval: float
    #: Behind a transaction-pooling pooler: no ``LISTEN`` (a server connection is
    #: the client's only during a transaction, so notifications go astray; receivers
    #: poll every ``poll_interval``) and no server-side prepared statements (one
    #: prepared on a server connection is not on the next).
    transaction_pooler: bool
    #: The URL without the password (in the user info or the query: ``password=``,
    #: ``sslpassword=``), for logs, ``Backend.url`` and ``repr``.
    safe_url: str
    #: ``host:port/database``, to name the server in error messages.
    where: str
    #: How long a lease lasts (seconds; Spanner's 10 s unless ``lease_seconds=``).
    lease_seconds: float = LEASE_SECONDS


def parse_url(url: str) -> PostgresConfig:
    """Parse and check a PostgreSQL URL (ConfigError naming the problem)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("postgresql", "postgres"):
        raise ConfigError(f"not a PostgreSQL URL: {_without_password(url)!r}")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    for key, _ in pairs:
        _check_option(key)
    own = {k: v for k, v in pairs if k in _OWN_OPTIONS}
    rest = [(k, v) for k, v in pairs if k not in _OWN_OPTIONS]
    schema = own.get("schema", DEFAULT_SCHEMA)
    pooler = own.get("pooler", "session")
    if pooler not in POOLERS:
        raise ConfigError(f"pooler must be one of {', '.join(POOLERS)}, not {pooler!r}")
    if not _SCHEMA.fullmatch(schema):
        raise ConfigError(
            f"schema {schema!r} is not a lowercase PostgreSQL identifier (a letter or "
            "underscore, then up to 62 lowercase letters, digits or underscores)"
        )
    # %20 for a space, not a form's "+": libpq reads "+" as itself, and a space is
    # common in its options (options=-c statement_timeout=5s).
    query = urlencode(rest, quote_via=quote)
    # Built by hand: urlunsplit drops the "//" of an empty host, and libpq reads a
    # bare "postgresql:" as a keyword=value string ("missing '=' after ..."). With
    # the "//" kept, "postgresql://" connects with libpq's defaults, as psql does.
    conninfo = f"postgresql://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")
    # What libpq connects to where the URL is silent: its environment, then its defaults.
    host = parts.hostname or os.environ.get("PGHOST") or "localhost (socket)"
    port = (parts.port if _port_ok(parts) else None) or os.environ.get("PGPORT")
    database = (
        parts.path.lstrip("/") or os.environ.get("PGDATABASE") or "(default database)"
    )
    # libpq also takes the password (and sslpassword, the client key's) as a query
    # parameter: the safe URL keeps the parameter, not its value.
    shown_rest = [(k, REDACTED if v and is_secret_name(k) else v) for k, v in rest]
    safe_query = urlencode(shown_rest, quote_via=quote)
    safe = urlunsplit(("postgresql", _netloc_without_password(parts), parts.path, safe_query, ""))
    shown = [("schema", schema)] if schema != DEFAULT_SCHEMA else []
    shown += [("pooler", pooler)] if pooler != "session" else []
    lease = lease_seconds_option(own.get("lease_seconds", LEASE_SECONDS))
    shown += [("lease_seconds", repr(lease))] if lease != LEASE_SECONDS else []
    if shown:
        safe += ("&" if rest else "?") + urlencode(shown)
    return PostgresConfig(
        conninfo=conninfo,
        schema=schema,
        pool_size=int(_number(own, "pool_size", 10, low=1, high=1000)),
        pool_timeout=_number(own, "pool_timeout", 30.0, low=0.1, high=3600),
        poll_interval=_number(own, "poll_interval", 1.0, low=0.01, high=60),
        transaction_pooler=pooler == "transaction",
        safe_url=safe,
        where=f"{host}:{port or 5432}/{database}",
        lease_seconds=lease,
    )


def _check_option(key: str) -> None:
    """Refuse a query parameter that looks like a misspelt option (ConfigError
    with the suggestion): libpq would only say ``invalid URI query parameter``."""
    if key in _OWN_OPTIONS or key in LIBPQ_KEYWORDS:
        return
    close = difflib.get_close_matches(key, (*_OWN_OPTIONS, *LIBPQ_KEYWORDS), n=1, cutoff=0.75)
    if close:
        raise ConfigError(
            f"PostgreSQL URL: unknown option {key!r}: did you mean {close[0]!r}? "
            f"(agentq's: {', '.join(_OWN_OPTIONS)}; any other is libpq's)"
        )


def _port_ok(parts: SplitResult) -> bool:
    try:
        _ = parts.port  # raises on a port that is not a number
    except ValueError as exc:
        raise ConfigError(f"PostgreSQL URL has an invalid port: {exc}") from None
    return True


def _netloc_without_password(parts: SplitResult) -> str:
    netloc = parts.netloc
    if "@" not in netloc:
        return netloc
    userinfo, hostport = netloc.rsplit("@", 1)
    return f"{userinfo.split(':', 1)[0]}@{hostport}"


def _without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
        return redact_text(urlunsplit(parts._replace(netloc=_netloc_without_password(parts))))
    except ValueError:
        return "(unparsable URL)"


def _number(
    options: dict[str, str], name: str, default: float, *, low: float, high: float
) -> float:
    text = options.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # also refuses nan
        raise ConfigError(f"{name} must be a number from {low:g} to {high:g}, not {text!r}")
    if name == "pool_size" and value != int(value):
        raise ConfigError(f"pool_size must be a whole number, not {text!r}")
    return value
