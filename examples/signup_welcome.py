"""Work after commit: a sign-up and its welcome email commit together, or neither.

The decision inserts the user row and enqueues the welcome email in one
transaction. The email is sent only after (and only if) the sign-up committed;
an exception inside the decision rolls back both: no user, no email.

On PostgreSQL, by the URL alone: ``AGENTQ_DB=postgresql://user@host/db python
examples/signup_welcome.py`` (an empty database).
"""

# expect: ada signed up: users=['ada'], welcome tasks=1
# expect: bob's sign-up failed (email already taken): users=['ada'], welcome tasks=1
# expect: welcome emails sent: ['ada@example.com']

from __future__ import annotations

import os

from pydantic import BaseModel

from agentq import Decision, FakeClock, Runtime, ToolContext, tool

#: Where agentq keeps its state: sqlite:///:memory:, or AGENTQ_DB (a postgresql:// URL).
DB = os.environ.get("AGENTQ_DB") or "sqlite:///:memory:"

SENT: list[str] = []


class Welcome(BaseModel):
    email: str


@tool(queue="emails")
def send_welcome(ctx: ToolContext, args: Welcome) -> None:
    """Send the welcome email (a real one would POST to a mail API with ctx.http)."""
    SENT.append(args.email)


def sign_up(rt: Runtime, user: str, email: str) -> None:
    def decide(tx: Decision) -> None:
        tx.enqueue("send_welcome", {"email": email})  # enqueued first, on purpose
        taken = tx.execute("SELECT 1 FROM users WHERE email = ?", (email,))
        if taken:
            raise ValueError("email already taken")  # rolls back the enqueue too
        tx.execute("INSERT INTO users (name, email) VALUES (?, ?)", (user, email))

    rt.transact(decide)


def main() -> None:
    rt = Runtime(DB, tools=[send_welcome], clock=FakeClock())
    rt.transact(lambda tx: tx.execute("CREATE TABLE users (name TEXT, email TEXT UNIQUE)"))

    def users() -> list[str]:
        return [r[0] for r in rt.transact(lambda tx: tx.execute("SELECT name FROM users"))]

    def welcome_tasks() -> int:
        return len(rt.tasks(tool="send_welcome"))

    sign_up(rt, "ada", "ada@example.com")
    print(f"ada signed up: users={users()}, welcome tasks={welcome_tasks()}")
    try:
        sign_up(rt, "bob", "ada@example.com")
    except ValueError as exc:
        print(f"bob's sign-up failed ({exc}): users={users()}, welcome tasks={welcome_tasks()}")
    rt.worker().drain()  # the worker runs only what committed
    print("welcome emails sent:", SENT)
    rt.close()


if __name__ == "__main__":
    main()
