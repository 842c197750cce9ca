"""Fresh databases for a live run, through google-cloud-spanner's admin API.

No ``gcloud``: the run creates its databases with ``Database.create()`` (one
long-running operation each, awaited), applies its DDL from agentq itself
(``ddl=auto``, per test), and drops them with ``Database.drop()`` unless asked
to keep them. The same code runs against a real instance (Application Default
Credentials) and against the emulator through the queue stand-in (anonymous,
plaintext to a loopback endpoint).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Instance", "Target", "new_run_id"]

#: How long creating or dropping one database may take (a long-running operation).
OPERATION_SECONDS = 600


def new_run_id() -> str:
    """Six lower-case letters and digits: the run's databases and names carry it."""
    return secrets.token_hex(3)


@dataclass
class Target:
    """Where the run goes: a real instance (``endpoint`` None) or an emulator's."""

    project: str
    instance: str
    endpoint: str | None = None
    created: list[str] = field(default_factory=list)

    def client(self) -> Any:
        """An admin-capable client: credentials from the environment, or
        anonymous on a plaintext endpoint."""
        from google.cloud import spanner

        kwargs: dict[str, Any] = {"project": self.project, "disable_builtin_metrics": True}
        if self.endpoint is not None:
            from google.api_core.client_options import ClientOptions
            from google.auth.credentials import AnonymousCredentials

            kwargs["credentials"] = AnonymousCredentials()
            kwargs["client_options"] = ClientOptions(api_endpoint=self.endpoint)
        return spanner.Client(**kwargs)

    def describe(self) -> Instance:
        """The instance's compute and edition, read from the admin API."""
        client = self.client()
        pb = client.instance_admin_api.get_instance(
            name=f"projects/{self.project}/instances/{self.instance}"
        )
        units = pb.processing_units or pb.node_count * 1000
        autoscaled = " (autoscaled: its current size)" if pb.autoscaling_config else ""
        return Instance(
            name=self.instance,
            config=pb.config.rsplit("/", 1)[-1],
            processing_units=int(units),
            edition=getattr(pb.edition, "name", str(pb.edition)) + autoscaled,
        )

    def create_database(self, database_id: str, postgres: bool) -> str:
        """Create an empty database of a dialect; returns its ``spanner://`` URL."""
        from google.cloud.spanner_admin_database_v1 import DatabaseDialect

        dialect = DatabaseDialect.POSTGRESQL if postgres else DatabaseDialect.GOOGLE_STANDARD_SQL
        database = self.client().instance(self.instance).database(
            database_id, database_dialect=dialect
        )
        database.create().result(OPERATION_SECONDS)
        self.created.append(database_id)
        return self.url(database_id, postgres)

    def url(self, database_id: str, postgres: bool) -> str:
        options = ["ddl=auto"]
        if postgres:
            options.append("dialect=postgresql")
        if self.endpoint is not None:
            options.append(f"endpoint={self.endpoint}")
        return (
            f"spanner://projects/{self.project}/instances/{self.instance}/databases/"
            f"{database_id}?{'&'.join(options)}"
        )

    def drop_created(self) -> list[str]:
        """Drop every database this run created; returns the ones that failed."""
        failed = []
        instance = self.client().instance(self.instance)
        for database_id in self.created:
            try:
                instance.database(database_id).drop()
            except Exception as exc:
                failed.append(f"{database_id}: {exc}")
        self.created.clear()
        return failed


@dataclass
class Instance:
    """What the run's cost depends on."""

    name: str
    config: str
    processing_units: int
    edition: str

    def cost_line(self, minutes: float) -> str:
        """Compute used by the run: processing units (1,000 to a node) times minutes.
        Spanner bills the instance whether or not the run uses it; this is the
        share of its time the run took, for the instance's own price per node-hour
        (edition and region: see the Spanner pricing page)."""
        nodes = self.processing_units / 1000
        node_hours = nodes * minutes / 60
        return (
            f"instance {self.name} ({self.edition}, {self.config or 'config unknown'}): "
            f"{self.processing_units} processing units ({nodes:g} node(s)) x {minutes:.1f} "
            f"minutes = {node_hours:.3f} node-hours"
        )
