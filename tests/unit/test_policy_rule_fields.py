"""An approval rule on a field its tool does not take is refused at load (issue 28, item 6).

``field = "amonut"`` used to load: the rule then found no such argument, failed
closed, and every refund waited for a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq import ConfigError, Runtime

ROOT = Path(__file__).resolve().parents[2]


def _policies(tmp_path: Path, field: str) -> Path:
    folder = tmp_path / "policies"
    folder.mkdir()
    text = (ROOT / "policies" / "refunds.toml").read_text(encoding="utf-8")
    assert 'field = "amount"' in text
    (folder / "refunds.toml").write_text(text.replace('field = "amount"', f'field = "{field}"'))
    return folder


def test_a_misspelled_rule_field_is_refused_naming_file_tool_and_field(tmp_path: Path) -> None:
    policies = _policies(tmp_path, "amonut")
    with pytest.raises(ConfigError) as exc:
        Runtime(f"sqlite:///{tmp_path / 'a.db'}", tools=ROOT / "tools", policies=policies)
    text = str(exc.value)
    assert str(policies / "refunds.toml") in text
    assert "'execute_refund'" in text and "'amonut'" in text
    assert "did you mean 'amount'" in text


def test_a_producer_checks_rules_against_the_recorded_catalog(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'a.db'}"
    with Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies") as worker_rt:
        worker_rt.record_tools()
    with pytest.raises(ConfigError, match=r"did you mean 'amount'"):
        Runtime(db, policies=_policies(tmp_path, "amonut"))


def test_the_rule_on_the_right_field_loads(tmp_path: Path) -> None:
    with Runtime(f"sqlite:///{tmp_path / 'a.db'}", tools=ROOT / "tools",
                 policies=_policies(tmp_path, "amount")) as rt:  # fmt: skip
        assert rt.policy.approvals[0].field == "amount"
