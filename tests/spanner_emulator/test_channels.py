"""Closing a Spanner backend closes the client's gRPC channels (issue 29, defect 7):
a process that opens and closes runtimes (tests, notebooks, a CLI in a loop)
must not keep a channel per open.
"""

from __future__ import annotations

from typing import Any

from agentq import open_backend

from .fixtures import EmulatorDatabase


def _channels(backend: Any) -> list[Any]:
    """The data and admin API channels of a backend's client."""
    database = backend.database
    client = database._instance._client
    return [database.spanner_api.transport.grpc_channel,
            client.database_admin_api.transport.grpc_channel]  # fmt: skip


def _is_open(channel: Any) -> bool:
    import grpc

    try:
        channel.unary_unary("/agentq.Probe/Closed")(b"", timeout=0.5)
    except ValueError:  # "Cannot invoke RPC on closed channel!"
        return False
    except grpc.RpcError:  # an open channel: the emulator does not know the method
        return True
    return True


def test_twenty_open_close_cycles_leave_no_channel_open(
    emulator_database_factory: Any,
) -> None:
    db: EmulatorDatabase = emulator_database_factory(False)
    setup = open_backend(db.direct_url)
    setup.apply_ddl([])  # type: ignore[attr-defined]
    setup.close()
    channels: list[Any] = []
    for _ in range(20):
        b = open_backend(db.direct_url)
        b.get_record("things", "k")  # uses the data channel
        channels += _channels(b)
        b.close()
    still_open = [c for c in channels if _is_open(c)]
    assert len(channels) == 40 and still_open == [], f"{len(still_open)} of 40 left open"
