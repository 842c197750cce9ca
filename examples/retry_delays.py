"""Custom retry delays beside the default backoff.

Three tools fail twice, then succeed:

* ``flaky`` raises an ordinary exception: the default exponential backoff with
  jitter (1 s then 2 s, each between half and all of it), counted as failures;
* ``known_delay`` knows how long the problem lasts and raises
  ``RetryLater(300)``: retried exactly 5 minutes later, not counted as a failure;
* ``rate_limited`` calls an API on loopback (real HTTP) that answers
  ``429 Too Many Requests`` with ``Retry-After: 120``: ``ctx.http`` turns that
  into a retry exactly 2 minutes later, and holds the tool back until then.

Each retry is the Spanner queue pattern: ack the failed delivery and send the next
attempt with an explicit delivery time, in one transaction. The delays are read
from the ledger (``next_attempt_at``) on a fake clock.
"""

# expect: flaky: default backoff, 2 failures, delays within 0.5-1 s and 1-2 s
# expect: known_delay: RetryLater(300), delays 300 s, 300 s, failures counted 0
# expect: rate_limited: 429 Retry-After: 120, delays 120 s, 120 s, failures counted 0
# expect: all three succeeded

from __future__ import annotations

from pydantic import BaseModel

from agentq import FakeClock, Policy, RetryLater, Runtime, ToolContext, tool
from agentq.http import checked
from agentq.testing import LoopbackAPI


class Call(BaseModel):
    name: str


@tool(queue="calls")
def flaky(ctx: ToolContext, args: Call) -> None:
    if ctx.attempt <= 2:
        raise ConnectionError("upstream reset the connection")


@tool(queue="calls")
def known_delay(ctx: ToolContext, args: Call) -> None:
    if ctx.attempt <= 2:
        raise RetryLater(300, "the nightly export locks the table for five minutes")


@tool(queue="calls")
def rate_limited(ctx: ToolContext, args: Call) -> None:
    checked(ctx.http.post(f"{ctx.settings['api']}/notifications", json={}), "notifications API")


def main() -> None:
    clock = FakeClock()
    policy = Policy.model_validate({"tools": {"rate_limited": {"allowed_hosts": ["127.0.0.1"]}}})
    with LoopbackAPI() as api:
        rt = Runtime("sqlite:///:memory:", tools=[flaky, known_delay, rate_limited],
                     policies=policy, clock=clock, settings={"api": api.url})  # fmt: skip
        for _ in range(2):
            api.fail_next("/notifications", 429, retry_after=120)
        tasks = {name: rt.enqueue_action(name, {"name": name}).task_id
                 for name in ("flaky", "known_delay", "rate_limited")}  # fmt: skip
        delays: dict[str, list[float]] = {name: [] for name in tasks}
        seen: set[tuple[str, int]] = set()
        worker = rt.worker()
        for _ in range(10):
            worker.drain()
            pending = []
            for name, task_id in tasks.items():
                info = rt.task(task_id)
                if info.status == "retry_scheduled" and info.next_attempt_at is not None:
                    if (name, info.attempt) not in seen:  # a new retry: its delay from now
                        seen.add((name, info.attempt))
                        delays[name].append((info.next_attempt_at - clock.now()).total_seconds())
                    pending.append(info.next_attempt_at)
            if not pending:
                break
            clock.set(min(pending))

        low, high = delays["flaky"]
        assert 0.5 <= low <= 1 and 1 <= high <= 2, delays["flaky"]
        print(f"flaky: default backoff, {rt.task(tasks['flaky']).failures} failures, "
              "delays within 0.5-1 s and 1-2 s")  # fmt: skip
        print(f"  (this run: {low:.2f} s, {high:.2f} s)")
        for name, how in (("known_delay", "RetryLater(300)"),
                          ("rate_limited", "429 Retry-After: 120")):  # fmt: skip
            shown = ", ".join(f"{d:g} s" for d in delays[name])
            print(f"{name}: {how}, delays {shown}, "
                  f"failures counted {rt.task(tasks[name]).failures}")  # fmt: skip
        if all(rt.task(t).status == "succeeded" for t in tasks.values()):
            print("all three succeeded")
        rt.close()


if __name__ == "__main__":
    main()
