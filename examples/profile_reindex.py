"""Dirty flag: a burst of profile updates triggers one reindex.

Each profile update commits the new profile row and a ``reindex`` task in one
transaction, with ``dedupe_key=f"user:{id}"``: while that user's reindex is
still pending (not started), the next update's enqueue collapses into it and
returns the same task. ``debounce="5s"`` holds a new reindex back 5 s so a
burst can collapse. Once a reindex has started, the next update makes a new
one: the running one may have read the profile before that change.
"""

# expect: 6 updates of user 7 -> 1 reindex task (5 collapsed)
# expect: reindexed user 7 as 'Jane Doe (v6)'
# expect: an update while the reindex ran made a new task: reindexed as 'Jane Doe (v8)'

from __future__ import annotations

from pydantic import BaseModel

from agentq import Decision, FakeClock, Runtime, ToolContext, tool

INDEX: dict[int, str] = {}
HOOKS: dict = {}  # what the example does while a reindex runs


class User(BaseModel):
    user_id: int


@tool(queue="search_index")
def reindex_profile(ctx: ToolContext, args: User) -> str:
    """Read the current profile and write it to the search index."""
    name = HOOKS["read_name"](args.user_id)
    meanwhile = HOOKS.pop("meanwhile", None)
    if meanwhile is not None:
        meanwhile()  # another update commits while this reindex runs
    INDEX[args.user_id] = name
    return name


def main() -> None:
    clock = FakeClock()
    rt = Runtime("sqlite:///:memory:", tools=[reindex_profile], clock=clock)
    rt.transact(lambda tx: tx.execute("CREATE TABLE profiles (id INT PRIMARY KEY, name TEXT)"))
    HOOKS["read_name"] = lambda uid: rt.transact(
        lambda tx: tx.execute("SELECT name FROM profiles WHERE id = ?", (uid,)))[0][0]

    def update(version: int):
        def decide(tx: Decision):
            tx.execute("INSERT OR REPLACE INTO profiles VALUES (7, ?)", (f"Jane Doe (v{version})",))
            return tx.submit("reindex_profile", {"user_id": 7}, dedupe_key="user:7",
                             debounce="5s")
        return rt.transact(decide)

    burst = [update(v) for v in range(1, 7)]
    collapsed = sum(s.collapsed for s in burst)
    print(f"6 updates of user 7 -> {len({s.task.task_id for s in burst})} reindex task "
          f"({collapsed} collapsed)")
    clock.advance(5)
    rt.worker().drain()
    print(f"reindexed user 7 as {INDEX[7]!r}")

    # A reindex that is running has read the profile already: an update now is
    # not collapsed into it, so the index ends with the latest name.
    update(7)
    late = []
    HOOKS["meanwhile"] = lambda: late.append(update(8))
    clock.advance(5)
    rt.worker().drain()  # this reindex read v7; v8 committed while it ran
    clock.advance(5)
    rt.worker().drain()
    if late[0].created:
        print(f"an update while the reindex ran made a new task: reindexed as {INDEX[7]!r}")
    rt.close()


if __name__ == "__main__":
    main()
