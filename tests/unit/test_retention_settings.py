"""Where the retention is set (issue 14): ``[agentq] retention`` in agentq.toml,
``retention`` in a tool's policy, and what each accepts and refuses."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from agentq.config import load_config
from agentq.errors import ConfigError
from agentq.lifecycle.retention import RetentionRules, policy_rules
from agentq.policies import Policy, ToolPolicy, load_policies


def test_the_config_file_sets_the_retention(tmp_path: Path) -> None:
    file = tmp_path / "agentq.toml"
    file.write_text('[agentq]\nretention = "36h"\n')
    assert load_config(file).agentq.retention == timedelta(hours=36)
    file.write_text('[agentq]\nretention = "off"\n')
    assert load_config(file).agentq.retention == "off"
    file.write_text("[agentq]\n")
    assert load_config(file).agentq.retention is None  # unset: the runtime's default


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "must be more than 0"), ('"a week"', "invalid duration 'a week'"),
     ("true", "invalid retention True")],
)  # fmt: skip
def test_a_bad_config_retention_names_the_file_and_the_key(
    tmp_path: Path, value: str, message: str
) -> None:
    file = tmp_path / "agentq.toml"
    file.write_text(f"[agentq]\nretention = {value}\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_config(file)
    assert str(file) in str(info.value) and "retention" in str(info.value)


def test_a_tools_policy_sets_its_own_retention(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(
        '[tools.send_email]\nretention = "1h"\n[tools.audit_log]\nretention = "off"\n'
        "[tools.other]\nmax_attempts = 2\n"
    )
    policy = load_policies(tmp_path)
    assert policy.for_tool("send_email").retention == timedelta(hours=1)
    rules = policy_rules(timedelta(days=7), policy)
    assert rules.for_tool("send_email") == timedelta(hours=1)
    assert rules.for_tool("audit_log") is None
    assert rules.for_tool("other") == timedelta(days=7)
    assert rules.shortest == timedelta(hours=1)


def test_a_bad_policy_retention_names_the_file_and_the_tool(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text("[tools.send_email]\nretention = 0\n")
    with pytest.raises(ConfigError, match="must be more than 0") as info:
        load_policies(tmp_path)
    assert "p.toml" in str(info.value) and "send_email" in str(info.value)


def test_the_shortest_retention_ignores_tools_that_keep_everything() -> None:
    assert RetentionRules(None).shortest is None
    assert RetentionRules(None, {"a": None}).shortest is None
    assert RetentionRules(None, {"a": timedelta(hours=2)}).shortest == timedelta(hours=2)
    rules = policy_rules(None, Policy(tools={"a": ToolPolicy(retention="2h")}))
    assert rules.for_tool("b") is None and rules.for_tool("a") == timedelta(hours=2)
