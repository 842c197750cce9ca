"""A reminder 29 days ahead: a scheduled message, cancelled when it becomes moot.

Starting a trial schedules its "your trial ends tomorrow" email for day 29 in
the same transaction that records the trial. A user who converts before then
has the reminder cancelled in the transaction that records the conversion: it
is deleted from the queue, so it can never be sent. A fake clock stands in
for the 29 days.

On PostgreSQL, by the URL alone: ``AGENTQ_DB=postgresql://user@host/db python
examples/trial_reminder.py`` (an empty database).
"""

# expect: day 28: reminders sent []
# expect: day 29: reminders sent ['bob']
# expect: ada's reminder: cancelled (converted on day 10)
# expect: bob's reminder: succeeded

from __future__ import annotations

import os
from datetime import timedelta

from pydantic import BaseModel

from agentq import Decision, FakeClock, Runtime, ToolContext, tool

#: Where agentq keeps its state: sqlite:///:memory:, or AGENTQ_DB (a postgresql:// URL).
DB = os.environ.get("AGENTQ_DB") or "sqlite:///:memory:"

SENT: list[str] = []


class Reminder(BaseModel):
    user: str


@tool(queue="emails")
def trial_ending_reminder(ctx: ToolContext, args: Reminder) -> None:
    """Tell a user their trial ends tomorrow."""
    SENT.append(args.user)


def start_trial(rt: Runtime, user: str) -> None:
    def decide(tx: Decision) -> None:
        reminder = tx.schedule(
            "trial_ending_reminder", {"user": user}, at=tx.now + timedelta(days=29)
        )
        tx.execute("INSERT INTO trials VALUES (?, 'trial', ?)", (user, reminder.task_id))

    rt.transact(decide)


def convert(rt: Runtime, user: str) -> None:
    def decide(tx: Decision) -> None:
        ((reminder,),) = tx.execute("SELECT reminder FROM trials WHERE user_id = ?", (user,))
        tx.execute("UPDATE trials SET plan = 'paid' WHERE user_id = ?", (user,))
        tx.cancel(reminder, reason=f"converted on day {day(rt)}")  # moot now: deleted

    rt.transact(decide)


def day(rt: Runtime) -> int:
    return (rt.clock.now() - START).days


START = FakeClock().now()


def main() -> None:
    clock = FakeClock(START)
    rt = Runtime(DB, tools=[trial_ending_reminder], clock=clock)
    rt.transact(
        lambda tx: tx.execute("CREATE TABLE trials (user_id TEXT, plan TEXT, reminder TEXT)")
    )
    start_trial(rt, "ada")
    start_trial(rt, "bob")
    worker = rt.worker()

    clock.advance(timedelta(days=10))
    convert(rt, "ada")
    clock.advance(timedelta(days=18))
    worker.drain()
    print(f"day {day(rt)}: reminders sent {SENT}")
    clock.advance(timedelta(days=1))
    worker.drain()
    print(f"day {day(rt)}: reminders sent {SENT}")
    for user in ("ada", "bob"):
        ((reminder,),) = rt.transact(
            lambda tx, u=user: tx.execute("SELECT reminder FROM trials WHERE user_id = ?", (u,))
        )
        info = rt.task(reminder)
        why = f" ({info.error})" if info.status == "cancelled" else ""
        print(f"{user}'s reminder: {info.status}{why}")
    rt.close()


if __name__ == "__main__":
    main()
