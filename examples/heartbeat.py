"""Worker heartbeat / timeout detection on the raw queue API.

Queues have no UPDATE: a heartbeat acks the pending timeout message and sends a
new one further in the future, in one transaction (ack before send). If the
worker stops beating, the timeout message is delivered and handled.
"""

# expect: t=50s: worker-2 timed out

from __future__ import annotations

from datetime import timedelta

from agentq import FakeClock, KeyColumn, KeyType, PayloadType, QueueSpec, open_backend


def main() -> None:
    clock = FakeClock()
    q = open_backend("sqlite:///:memory:", clock=clock)
    q.create_queue(QueueSpec("WorkerTimeouts", (KeyColumn("worker", KeyType.STR),),
                             payload=PayloadType.JSON))  # fmt: skip

    def beat(worker: str) -> None:
        def fn(tx):
            tx.ack("WorkerTimeouts", worker, must_exist=False)
            tx.send("WorkerTimeouts", worker, {"worker": worker},
                    deliver_time=tx.now + timedelta(seconds=30))  # fmt: skip

        q.transact(fn)

    for second in range(0, 100, 10):  # worker-1 beats every 10 s; worker-2 stops at 20 s
        beat("worker-1")
        if second <= 20:
            beat("worker-2")
        for batch in q.stream("WorkerTimeouts", max_batch_size=10, max_duration=0):
            for msg in batch:
                print(f"t={second}s: {msg.payload['worker']} timed out")
                q.transact(lambda tx, m=msg: tx.ack("WorkerTimeouts", m.key))
        clock.advance(10)
    q.close()


if __name__ == "__main__":
    main()
