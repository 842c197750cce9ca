"""``open_spanner``: the client library's ``Client`` and ``Database`` for a URL."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import DefaultCredentialsError
from google.cloud import spanner
from google.cloud.spanner_admin_database_v1 import DatabaseDialect

from agentq.backends.spanner.backend import SpannerBackend
from agentq.backends.spanner.config import parse_url
from agentq.clock import Clock
from agentq.errors import BackendUnavailable

__all__ = ["open_spanner"]


def open_spanner(url: str, clock: Clock | None, options: Mapping[str, Any]) -> SpannerBackend:
    """Open ``spanner://projects/P/instances/I/databases/D[?dialect=postgresql&ddl=auto]``.

    Credentials come from the environment (Application Default Credentials);
    ``SPANNER_EMULATOR_HOST`` is honoured by the client. ``endpoint=HOST:PORT``
    points at a plaintext endpoint with anonymous credentials (tests, emulators).
    """
    config = parse_url(url)
    kwargs: dict[str, Any] = {"project": config.project, "disable_builtin_metrics": True}
    if config.endpoint is not None:
        kwargs["credentials"] = AnonymousCredentials()
        kwargs["client_options"] = ClientOptions(api_endpoint=config.endpoint)
    try:
        client = spanner.Client(**kwargs)
    except DefaultCredentialsError as exc:
        raise BackendUnavailable(
            "no Google Cloud credentials for Spanner: run `gcloud auth application-default "
            "login`, set GOOGLE_APPLICATION_CREDENTIALS, or SPANNER_EMULATOR_HOST for an emulator"
        ) from exc
    # The dialect is configured, not discovered: discovery needs admin permissions.
    database = client.instance(config.instance).database(
        config.database,
        database_dialect=DatabaseDialect.POSTGRESQL
        if config.postgres
        else DatabaseDialect.GOOGLE_STANDARD_SQL,
    )
    return SpannerBackend(
        database, url=config.safe_url, postgres=config.postgres, clock=clock,
        auto_ddl=config.auto_ddl, **dict(options),
    )  # fmt: skip
