"""Where ``agentq demo`` keeps its data: a temporary SQLite file, a new one
``--keep`` names, or a schema of its own in a PostgreSQL database, and the URL
that shows what a kept demo left (``agentq ui --db ...``).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from agentq.errors import ConfigError

__all__ = ["DEMO_SCHEMA", "demo_database", "is_postgres", "kept_database", "new_sqlite_database"]

#: The schema of a demo on PostgreSQL when its URL names none.
DEMO_SCHEMA = "agentq_demo"


def is_postgres(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database."""
    return urlsplit(url).scheme.lower() in ("postgresql", "postgres")


def demo_database(db: str) -> str:
    """``db`` as the demo uses it. On PostgreSQL, agentq's tables and the demo's
    ``orders`` table go to one schema of their own (``agentq_demo`` unless the URL
    says ``schema=``; its ``search_path``, unless the URL sets libpq's
    ``options``), so the demo leaves the rest of the database alone."""
    if not is_postgres(db):
        return db
    parts = urlsplit(db)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = dict(query).get("schema") or DEMO_SCHEMA
    query = [(k, v) for k, v in query if k != "schema"] + [("schema", schema)]
    if "options" not in dict(query):
        query.append(("options", f"-c search_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def kept_database(db: str) -> str:
    """The URL that shows what a demo in ``db`` left (``agentq ui --db ...``):
    without a password, and on PostgreSQL naming the demo's schema."""
    parts = urlsplit(db)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    if not is_postgres(db):
        return urlunsplit(parts._replace(netloc=netloc))
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = dict(query).get("schema") or DEMO_SCHEMA
    query = [(k, v) for k, v in query if k != "schema"] + [("schema", schema)]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, quote_via=quote)))


def new_sqlite_database(url: str) -> str:
    """The URL of the database ``--keep`` makes: SQLite, and not there yet (a demo
    never writes into a database someone may be using)."""
    if not url.lower().startswith("sqlite:///") or url.lower().startswith("sqlite:///:memory:"):
        raise ConfigError(
            f"agentq demo --keep runs in a new SQLite file or a PostgreSQL database, not {url}"
        )
    path = Path(url[len("sqlite:///") :].split("?", 1)[0]).absolute()
    query = url.split("?", 1)[1] if "?" in url else ""
    # Absolute, once: the killed worker runs in the demo's temporary folder, where a
    # relative sqlite:///agentq.db is another file (it never took its task).
    url = f"sqlite:///{path}" + (f"?{query}" if query else "")
    if path.exists():
        raise ConfigError(
            f"{path} exists: agentq demo --keep makes a new database and never writes into "
            f"one that may be in use; remove it (and its {path.name}-* files), or pass "
            f"--db sqlite:///another.db"
        )
    if not path.parent.is_dir():
        raise ConfigError(f"no folder {path.parent} for the demo's database {path.name}")
    return url
