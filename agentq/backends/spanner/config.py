"""The ``spanner://`` URL: what it names and which options it takes.

Plain Python (no google-cloud-spanner import).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from agentq.errors import ConfigError

__all__ = ["SpannerConfig", "parse_url"]

_PATH = re.compile(r"^/?projects/([^/]+)/instances/([^/]+)/databases/([^/]+)$")
_OPTIONS = ("dialect", "ddl", "endpoint")


@dataclass(frozen=True)
class SpannerConfig:
    """A parsed ``spanner://projects/P/instances/I/databases/D?...`` URL."""

    project: str
    instance: str
    database: str
    postgres: bool
    auto_ddl: bool
    endpoint: str | None
    #: The URL without secrets or client-only options, for logs and ``Backend.url``.
    safe_url: str


def parse_url(url: str) -> SpannerConfig:
    """Parse and check a Spanner URL (ConfigError naming the problem)."""
    parts = urlsplit(url)
    match = _PATH.match(parts.netloc + parts.path)
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
    safe_url = url.split("?", 1)[0] + (f"?dialect={dialect}" if postgres else "")
    return SpannerConfig(
        project=project, instance=instance, database=database, postgres=postgres,
        auto_ddl=query.get("ddl") == "auto", endpoint=query.get("endpoint"), safe_url=safe_url,
    )  # fmt: skip
