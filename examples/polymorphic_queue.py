"""Polymorphic queues: several kinds of task in one queue, served by one receiver.

The two strategies of the Spanner queue documents:

1. **type in the key**: the queue's primary key starts with the task type,
   ``(TaskType, TaskId)``; the receiver dispatches on ``key[0]``. Shown on the
   raw queue API (``agentq.open_backend``).
2. **type in the payload**: a JSON payload names its action. This is how agentq
   stores tasks: three tools declare the same ``queue="app"``, each message's
   envelope carries its ``tool``, and one worker serving only that queue runs
   each with its own handler and argument model.
"""

# expect: key-typed receiver: SEND_EMAIL task-1, GENERATE_THUMBNAIL task-2, SEND_EMAIL task-3
# expect: one worker on queue 'app' ran: send_email, generate_thumbnail, sync_inventory
# expect: queues used: ['app']

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agentq import (
    FakeClock,
    KeyColumn,
    KeyType,
    PayloadType,
    QueueSpec,
    Runtime,
    ToolContext,
    open_backend,
    tool,
)

RAN: list[str] = []


def type_in_the_key() -> None:
    q = open_backend("sqlite:///:memory:", clock=FakeClock())
    spec = QueueSpec("ApplicationTasks",
                     (KeyColumn("task_type", KeyType.STR), KeyColumn("task_id", KeyType.STR)),
                     payload=PayloadType.JSON)  # fmt: skip
    q.create_queue(spec)

    def send_all(tx: Any) -> None:
        tx.send("ApplicationTasks", ("SEND_EMAIL", "task-1"), {"to": "ada@example.com"})
        tx.send("ApplicationTasks", ("GENERATE_THUMBNAIL", "task-2"), {"image_id": "img-789"})
        tx.send("ApplicationTasks", ("SEND_EMAIL", "task-3"), {"to": "bob@example.com"})

    q.transact(send_all)
    handlers = {"SEND_EMAIL": lambda p: p["to"], "GENERATE_THUMBNAIL": lambda p: p["image_id"]}
    handled = []
    for batch in q.stream("ApplicationTasks", max_batch_size=10, max_duration=0):
        for msg in sorted(batch, key=lambda m: m.key[1]):
            task_type, task_id = msg.key
            handlers[task_type](msg.payload)  # dispatch on the type column of the key
            q.transact(lambda tx, m=msg: tx.ack("ApplicationTasks", m.key))
            handled.append(f"{task_type} {task_id}")
    print("key-typed receiver:", ", ".join(handled))
    q.close()


class Email(BaseModel):
    to: str


class Thumbnail(BaseModel):
    image_id: str
    size: str = "small"


class InventoryDelta(BaseModel):
    item_id: int
    delta: int


@tool(queue="app")
def send_email(ctx: ToolContext, args: Email) -> None:
    RAN.append("send_email")


@tool(queue="app")
def generate_thumbnail(ctx: ToolContext, args: Thumbnail) -> None:
    RAN.append("generate_thumbnail")


@tool(queue="app")
def sync_inventory(ctx: ToolContext, args: InventoryDelta) -> None:
    RAN.append("sync_inventory")


def type_in_the_payload() -> None:
    rt = Runtime("sqlite:///:memory:", tools=[send_email, generate_thumbnail, sync_inventory],
                 clock=FakeClock())  # fmt: skip

    def decide(tx: Any) -> None:  # ordered so that the log below reads in enqueue order
        tx.enqueue("send_email", {"to": "ada@example.com"}, ordering_key="demo")
        tx.enqueue("generate_thumbnail", {"image_id": "img-789"}, ordering_key="demo")
        tx.enqueue("sync_inventory", {"item_id": 987, "delta": -1}, ordering_key="demo")

    rt.transact(decide)
    rt.worker(queues=["app"], concurrency=1).drain()  # one receiver, one queue
    print("one worker on queue 'app' ran:", ", ".join(RAN))
    print("queues used:", sorted({rt.tools.get(t.tool).queue for t in rt.tasks()}))
    rt.close()


if __name__ == "__main__":
    type_in_the_key()
    type_in_the_payload()
