"""Authorization as an attacker would probe it (issue 27): a real uvicorn server on
127.0.0.1, real bearer tokens, and agents that try to reach what is not theirs —
their approval's timers, each other's tasks, approvals they did not ask for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentq import Runtime, SystemClock
from agentq.demo_server import DemoAPI
from agentq.ledger import Tables, TaskStatus
from tests.http.conftest import ROOT, WEBHOOK_SECRET, LiveServer, settings_for, write_policies

TOKENS = {
    "agent-token-0123456789": ("refund-agent", ["enqueue", "read"]),
    "rival-token-0123456789": ("rival-agent", ["enqueue", "read"]),
    "reader-token-012345678": ("auditor", ["read"]),
    "alice-token-0123456789": ("alice", ["approve", "read"]),
    "carol-token-0123456789": ("carol", ["approve"]),
    "ops-token-012345678901": ("ops-person", ["operate"]),
    "admin-token-0123456789": ("root", ["admin"]),
}
AGENT, RIVAL, READER, ALICE, CAROL, OPS, ADMIN = TOKENS
BIG = {"args": {"order_id": "o1", "amount": 500}}  # above 100: needs a human
SMALL = {"args": {"order_id": "o2", "amount": 30}}


def _policies(directory: Path) -> Path:
    """The refund bot's policies, its approval rule with an expiry and a reminder:
    every kind of approval timer exists."""
    write_policies(directory)
    path = directory / "refunds.toml"
    head, sep, rule = path.read_text().rpartition("[[approvals]]")
    rule = rule.replace('# expire_after = "7d"', 'expire_after = "7d"\n#')
    rule = rule.replace('# remind = ["24h", "1h"]', 'remind = ["24h"]\n#')
    path.write_text(head + sep + rule)
    return directory


def _tokens(path: Path) -> Path:
    from agentq.server.auth import hash_token

    path.write_text("\n".join(
        f'[[tokens]]\nname = "{name}"\nscopes = {scopes}\nsha256 = "{hash_token(token)}"\n'
        for token, (name, scopes) in TOKENS.items()
    ).replace("'", '"'))  # fmt: skip
    return path


@pytest.fixture
def runtime(db_url: str, api: DemoAPI, tmp_path: Path) -> Iterator[Runtime]:
    rt = Runtime(db_url, tools=ROOT / "tools", policies=_policies(tmp_path / "policies"),
                 clock=SystemClock(),
                 settings={**settings_for(api), "webhook_secret": WEBHOOK_SECRET})  # fmt: skip
    yield rt
    rt.close()


@pytest.fixture
def server(runtime: Runtime, tmp_path: Path) -> Iterator[LiveServer]:
    from agentq.server import TokenAuth, create_app

    auth = TokenAuth.from_file(_tokens(tmp_path / "tokens.toml"))
    live = LiveServer(create_app(runtime, auth=auth, max_wait=5)).start()
    yield live
    live.stop()


def _listed(http: httpx.Client) -> set[str]:
    r = http.get("/v1/tasks", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return {t["task_id"] for t in r.json()["tasks"]}


def _timer_ids(approval: dict[str, object]) -> list[str]:
    ids = [approval.get(k) for k in ("escalation_task_id", "deadline_task_id",
                                     "notify_task_id", "expiry_task_id")]  # fmt: skip
    reminders = approval.get("reminder_task_ids") or []
    assert isinstance(reminders, list)
    return [str(i) for i in [*ids, *reminders] if i]


# -- item 1: the runtime's own tasks are out of every agent's reach ------------------------


def test_an_agent_cannot_read_list_or_cancel_its_approvals_timers(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client(AGENT) as agent:
        task = agent.post("/v1/tools/execute_refund/actions", json=BIG).json()
        approval = agent.get(f"/v1/approvals/{task['approval_id']}").json()
    timers = _timer_ids(approval)
    kinds = {runtime.task(t).kind for t in timers}
    assert kinds == {"expiry", "reminder", "notify", "escalation"}, kinds
    # The old ids' scheme: the action's tail + 1, + 2, ... named the timers.
    tail = int(task["task_id"][18:], 16)
    guesses = [f"{task['task_id'][:18]}{tail + k:018x}" for k in range(1, 8)]
    assert not set(guesses) & set(timers)
    for token in (AGENT, ADMIN, OPS):
        with server.client(token) as http:
            for timer in [*timers, *guesses]:
                assert http.get(f"/v1/tasks/{timer}").status_code == 404, (token, timer)
                assert http.get(f"/v1/tasks/{timer}/events").status_code == 404
                cancel = http.post(f"/v1/tasks/{timer}:cancel")
                assert cancel.status_code == 404, (token, timer, cancel.text)
                assert timer not in cancel.text or "no task" in cancel.text
            assert not _listed(http) & set(timers)
    # Nothing was disarmed: every timer is still scheduled, the approval still pending.
    assert all(not runtime.task(t).done for t in timers)
    assert runtime.approval(task["approval_id"]).status == "pending"
    assert runtime.audit_log() == []


# -- item 2: tasks have owners ------------------------------------------------------------


def test_an_agent_sees_and_cancels_only_its_own_tasks(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client(AGENT) as agent:
        mine = agent.post("/v1/tools/execute_refund/actions", json=SMALL,
                          headers={"Idempotency-Key": "k1"}).json()  # fmt: skip
        asked = agent.post("/v1/tools/execute_refund/actions", json=BIG).json()
        assert mine["created_by"] == "refund-agent"
        assert agent.get(f"/v1/tasks/{mine['task_id']}").status_code == 200
        assert _listed(agent) == {mine["task_id"], asked["task_id"]}
    with server.client(RIVAL) as rival:
        theirs = rival.post("/v1/tools/execute_refund/actions", json=SMALL).json()
        for task_id in (mine["task_id"], asked["task_id"]):
            assert rival.get(f"/v1/tasks/{task_id}").status_code == 404
            waited = rival.get(f"/v1/tasks/{task_id}", headers={"Prefer": "wait=1"})
            assert waited.status_code == 404
            assert rival.get(f"/v1/tasks/{task_id}/events").status_code == 404
            assert rival.post(f"/v1/tasks/{task_id}:cancel").status_code == 404
        assert rival.get(f"/v1/approvals/{asked['approval_id']}").status_code == 404
        assert rival.get("/v1/approvals").json()["approvals"] == []
        assert _listed(rival) == {theirs["task_id"]}
    with server.client(READER) as reader:  # read alone: its own tasks, of which it has none
        assert reader.get(f"/v1/tasks/{mine['task_id']}").status_code == 404
        assert _listed(reader) == set()
        assert reader.post(f"/v1/tasks/{theirs['task_id']}:cancel").status_code == 403
    assert runtime.task(mine["task_id"]).status == TaskStatus.QUEUED
    with server.client(AGENT) as agent:
        assert agent.get(f"/v1/approvals/{asked['approval_id']}").status_code == 200
        assert agent.post(f"/v1/tasks/{asked['task_id']}:cancel").status_code == 200
    with server.client(OPS) as ops:  # the humans who run the queue see and cancel all
        assert _listed(ops) >= {mine["task_id"], theirs["task_id"]}
        assert ops.post(f"/v1/tasks/{theirs['task_id']}:cancel").status_code == 200
        assert ops.post("/v1/tools/execute_refund/actions", json=SMALL).status_code == 403
    with server.client(ADMIN) as admin:
        assert admin.get(f"/v1/tasks/{mine['task_id']}").status_code == 200
    assert [e.actor for e in runtime.audit_log(target=asked["task_id"])] == ["refund-agent"]
    assert [e.actor for e in runtime.audit_log(target=theirs["task_id"])] == ["ops-person"]
    key = runtime.backend.get_record(Tables.IDEMPOTENCY, "http:refund-agent:k1")
    assert key is not None and key["created_by"] == "refund-agent"
    assert runtime.approval(asked["approval_id"]).created_by == "refund-agent"


@pytest.mark.parametrize("name", ["local", "agentq"])
def test_a_token_cannot_take_a_reserved_owners_name(tmp_path: Path, name: str) -> None:
    from agentq.errors import ConfigError
    from agentq.server.auth import TokenAuth, hash_token

    path = tmp_path / "tokens.toml"
    path.write_text(f'[[tokens]]\nname = "{name}"\nscopes = ["read"]\n'
                    f'sha256 = "{hash_token("x" * 32)}"\n')  # fmt: skip
    with pytest.raises(ConfigError, match="reserved"):
        TokenAuth.from_file(path)


# -- item 3: four eyes ----------------------------------------------------------------------


def test_nobody_approves_or_rejects_a_call_it_enqueued_itself(
    server: LiveServer, runtime: Runtime
) -> None:
    from agentq.server.problems import SELF_APPROVAL_TYPE

    with server.client(ADMIN) as admin:  # every scope, and still not its own approval
        task = admin.post("/v1/tools/execute_refund/actions", json=BIG).json()
        approval_id = task["approval_id"]
        etag = admin.get(f"/v1/approvals/{approval_id}").headers["etag"]
        for verb in ("approve", "reject"):
            r = admin.post(f"/v1/approvals/{approval_id}:{verb}", headers={"If-Match": etag})
            assert r.status_code == 403, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            body = r.json()
            assert body["type"] == SELF_APPROVAL_TYPE and body["rule"] == "approvals[0]"
            assert "four eyes" in body["detail"]
    assert runtime.approval(approval_id).status == "pending"
    assert runtime.audit_log() == []
    with server.client(ALICE) as alice:  # another principal may
        ok = alice.post(f"/v1/approvals/{approval_id}:approve", headers={"If-Match": etag})
    assert ok.status_code == 200, ok.text
    assert runtime.approval(approval_id).decided_by == "alice"


# -- item 4: an approve-only token can do its job --------------------------------------------


def test_an_approve_only_token_reads_and_decides_the_approvals_it_may(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client(AGENT) as agent:
        task = agent.post("/v1/tools/execute_refund/actions", json=BIG).json()
        agent.post("/v1/tools/execute_refund/actions", json=SMALL)
    with server.client(CAROL) as carol:  # scopes: approve, nothing else
        listed = carol.get("/v1/approvals", params={"status": "pending"})
        assert listed.status_code == 200, listed.text
        assert [a["approval_id"] for a in listed.json()["approvals"]] == [task["approval_id"]]
        one = carol.get(f"/v1/approvals/{task['approval_id']}")
        assert one.status_code == 200 and one.headers["etag"]
        ok = carol.post(f"/v1/approvals/{task['approval_id']}:approve",
                        headers={"If-Match": one.headers["etag"]})  # fmt: skip
        assert ok.status_code == 200, ok.text
        # Approving reads no tasks: those stay the agent's.
        assert carol.get(f"/v1/tasks/{task['task_id']}").status_code == 403
    assert runtime.approval(task["approval_id"]).decided_by == "carol"


# -- item 8: idempotency keys name the whole request, and only their principal's --------------


def test_a_key_reused_with_any_other_option_is_422(server: LiveServer, runtime: Runtime) -> None:
    key = {"Idempotency-Key": "k-opts"}
    with server.client(AGENT) as agent:
        first = agent.post("/v1/tools/execute_refund/actions", json=SMALL, headers=key)
        assert first.status_code == 202, first.text
        same = agent.post("/v1/tools/execute_refund/actions", json=SMALL, headers=key)
        assert same.status_code == 200 and same.json()["task_id"] == first.json()["task_id"]
        changed = {
            "ordering_key": {**SMALL, "ordering_key": "order-o2"},
            "reason": {**SMALL, "reason": "a different story"},
            "dedupe_key": {**SMALL, "dedupe_key": "d1"},
        }
        for what, body in changed.items():
            r = agent.post("/v1/tools/execute_refund/actions", json=body, headers=key)
            assert r.status_code == 422, (what, r.text)
            assert first.json()["task_id"] in r.json()["detail"]
        empty = agent.post("/v1/tools/execute_refund/actions", json=SMALL,
                           headers={"Idempotency-Key": '""'})  # fmt: skip
        assert empty.status_code == 400, empty.text
    assert len(runtime.tasks()) == 1


def test_principal_names_cannot_collide_through_the_key_separator(
    runtime: Runtime, tmp_path: Path
) -> None:
    from agentq.server import Principal, Scope, TokenAuth, create_app

    scopes = frozenset({Scope.ENQUEUE, Scope.READ})
    auth = TokenAuth.from_tokens({
        "bot-token-0123456789ab": Principal("bot", scopes),
        "boteu-token-0123456789": Principal("bot:eu", scopes),
    })  # fmt: skip
    live = LiveServer(create_app(runtime, auth=auth)).start()
    try:
        with live.client("bot-token-0123456789ab") as bot:
            theirs = bot.post("/v1/tools/execute_refund/actions", json=SMALL,
                              headers={"Idempotency-Key": "eu:42"})  # fmt: skip
        with live.client("boteu-token-0123456789") as bot_eu:
            mine = bot_eu.post("/v1/tools/execute_refund/actions", json=SMALL,
                               headers={"Idempotency-Key": "42"})  # fmt: skip
            assert bot_eu.get(f"/v1/tasks/{theirs.json()['task_id']}").status_code == 404
    finally:
        live.stop()
    assert (theirs.status_code, mine.status_code) == (202, 202), mine.text
    assert mine.json()["task_id"] != theirs.json()["task_id"]
    assert runtime.task(mine.json()["task_id"]).created_by == "bot:eu"


# -- issue 40 item 3: an approval one may not see answers as one that does not exist ----------


def test_deciding_an_approval_one_may_not_see_answers_as_a_missing_one(
    runtime: Runtime, tmp_path: Path
) -> None:
    """Only alice decides refunds here: carol (``approve``) and the rival agent
    (``read``) cannot tell alice's approval from an id that does not exist, on
    any approval route, with any ``If-Match`` (one tag, a stale one, several)."""
    from agentq.server import TokenAuth, create_app

    policies = _policies(tmp_path / "only-alice")
    path = policies / "refunds.toml"
    path.write_text(path.read_text().replace('# approvers = ["alice", "bob"]',
                                             'approvers = ["alice"]\n#'))  # fmt: skip
    rt = Runtime(runtime.backend.url, tools=ROOT / "tools", policies=policies,
                 clock=SystemClock())  # fmt: skip
    auth = TokenAuth.from_file(_tokens(tmp_path / "tokens.toml"))
    live = LiveServer(create_app(rt, auth=auth, max_wait=5)).start()
    try:
        with live.client(AGENT) as agent:
            approval_id = agent.post("/v1/tools/execute_refund/actions", json=BIG).json()[
                "approval_id"
            ]
        with live.client(ALICE) as alice:
            etag = alice.get(f"/v1/approvals/{approval_id}").headers["etag"]
        missing = "apr_" + "0" * 26
        stale = '"' + "0" * 32 + '"'
        tags = [etag, stale, f"{stale}, {etag}", f'{stale}, "{"1" * 32}"']
        edit = {"args": {"order_id": "o1", "amount": 5}}

        def answers(token: str, target: str) -> list[tuple[int, str]]:
            with live.client(token) as http:
                seen = [http.get(f"/v1/approvals/{target}")]
                for verb in ("approve", "reject"):
                    for tag in tags:
                        seen.append(http.post(f"/v1/approvals/{target}:{verb}",
                                              headers={"If-Match": tag}))  # fmt: skip
                    seen.append(http.post(f"/v1/approvals/{target}:{verb}",
                                          headers={"If-Match": etag}, json=edit))  # fmt: skip
            return [(r.status_code, r.json().get("title", "")) for r in seen]

        for token in (CAROL, RIVAL):
            hidden, absent = answers(token, approval_id), answers(token, missing)
            assert hidden == absent, (token, hidden, absent)
        assert answers(CAROL, missing)[0] == (404, "Approval not found")
        assert rt.approval(approval_id).status == "pending"
    finally:
        live.stop()
        rt.close()
