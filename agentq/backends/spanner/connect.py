"""``open_spanner``: the client library's ``Client`` and ``Database`` for a URL.

Every call gets a deadline. The generated client's defaults retry UNAVAILABLE for
up to an hour on most methods (so ``agentq init`` against an unreachable endpoint
printed nothing for minutes); here each method of the data and admin APIs is
re-wrapped with a per-call deadline of ``timeout`` seconds (URL option, default
30), retrying UNAVAILABLE and RESOURCE_EXHAUSTED with backoff only within it.
Opening also checks, within the same bound, that the endpoint accepts a
connection, so a wrong endpoint fails at once with :class:`BackendUnavailable`
naming it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.api_core import gapic_v1
from google.api_core import retry as retries
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import DefaultCredentialsError
from google.cloud import spanner
from google.cloud.spanner_admin_database_v1 import DatabaseDialect

from agentq.backends.spanner.backend import SpannerBackend
from agentq.backends.spanner.config import SpannerConfig, parse_url
from agentq.backends.spanner.hooks import check_hooks, check_wrapped_methods
from agentq.clock import Clock
from agentq.errors import BackendUnavailable

__all__ = ["bound_deadlines", "open_spanner"]

log = logging.getLogger("agentq.backends.spanner")

_DEFAULT_HOST = "spanner.googleapis.com"


def open_spanner(url: str, clock: Clock | None, options: Mapping[str, Any]) -> SpannerBackend:
    """Open ``spanner://projects/P/instances/I/databases/D[?options]``.

    Options: ``dialect=postgresql``, ``ddl=auto``, ``database_role=ROLE``
    (fine-grained access control), ``timeout=SECONDS`` (per call),
    ``receive_duration=SECONDS`` (one worker RECEIVE), ``receive_short=cancel``
    (``cancel:SECONDS``, ``0s``: how a one-shot receive is sent, see
    :class:`~.config.ReceiveShort`), ``namespace=PREFIX`` (a prefix of agentq's queue
    and table names in the database), ``endpoint=HOST:PORT``.

    Credentials come from the environment (Application Default Credentials);
    ``SPANNER_EMULATOR_HOST`` is honoured by the client. ``endpoint=HOST:PORT``
    points at a plaintext endpoint with anonymous credentials (tests, emulators).
    """
    config = parse_url(url)
    check_hooks()  # a client whose private layout moved fails here, by name
    endpoint = config.endpoint or os.environ.get("SPANNER_EMULATOR_HOST") or _DEFAULT_HOST
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
        database_role=config.database_role,
    )
    bound_deadlines(database.spanner_api, config.timeout)
    bound_deadlines(client.database_admin_api, config.timeout)
    _check_reachable(database.spanner_api, endpoint, config)
    backend_options = {
        "receive_duration": config.receive_duration,
        "receive_short": config.receive_short,
        "namespace": config.namespace,
        **dict(options),
    }
    backend = SpannerBackend(
        database, url=config.safe_url, postgres=config.postgres, clock=clock,
        auto_ddl=config.auto_ddl, endpoint=endpoint, call_timeout=config.timeout,
        **backend_options,
    )  # fmt: skip
    backend.channel_closers += [
        database.spanner_api.transport.close,
        client.database_admin_api.transport.close,
    ]
    return backend


def bound_deadlines(api: Any, timeout: float) -> None:
    """Give every method of a generated client a deadline of ``timeout`` seconds.

    The generated transports keep their wrapped methods (default retry and
    timeout) in ``_wrapped_methods``; there is no public setting for all of them.
    A client without it raises :class:`~.hooks.ClientLayoutChanged` (calls would
    otherwise keep the library's hour-long retries, unnoticed).
    """
    wrapped = check_wrapped_methods(getattr(api, "transport", None))
    retry = retries.Retry(
        initial=0.25,
        maximum=4.0,
        multiplier=2.0,
        predicate=retries.if_exception_type(gexc.ServiceUnavailable, gexc.ResourceExhausted),
        timeout=timeout,
    )
    for method in list(wrapped):
        wrapped[method] = gapic_v1.method.wrap_method(
            method, default_retry=retry, default_timeout=timeout
        )


def _check_reachable(api: Any, endpoint: str, config: SpannerConfig) -> None:
    """Fail fast when nothing accepts a connection at the endpoint."""
    channel = getattr(api.transport, "grpc_channel", None)
    if channel is None:
        return
    wait = min(config.timeout, 10.0)
    try:
        grpc.channel_ready_future(channel).result(timeout=wait)
    except grpc.FutureTimeoutError as exc:
        raise BackendUnavailable(
            f"cannot reach Spanner at {endpoint} (no connection within {wait:g} s); "
            "check the endpoint, the network and SPANNER_EMULATOR_HOST"
        ) from exc
