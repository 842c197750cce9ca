"""Policy files and tool modules: loading, validation and clear errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentq import ConfigError, InvalidArguments, ToolContext, ToolRegistry, load_policies, tool
from agentq.policies import parse_duration

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_policy_loads() -> None:
    policy = load_policies(ROOT / "policies")
    assert policy.approval_rule("execute_refund", {"amount": 100}) is None
    rule = policy.approval_rule("execute_refund", {"amount": 100.01})
    assert rule is not None and rule.escalate_after == timedelta(hours=72)
    assert "127.0.0.1" in policy.for_tool("execute_refund").allowed_hosts
    assert policy.for_tool("unknown").allowed_hosts == ()  # unconfigured tools reach nothing


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[tools.x]\nallowed_hosts = 'a'", "allowed_hosts"),
        ("[tools.x]\nrate_limit_per_second = -1", "rate_limit_per_second"),
        ("[defaults]\nescalate_after = 'soon'", "invalid duration 'soon'"),
        ("[[approvals]]\nfield = 'amount'", "tool"),
        ("[surprise]\nx = 1", "unknown section"),
        ("[tools.x\n", "policy file"),
        ("[tools.x]\ntypo_setting = 1", "typo_setting"),
    ],
)
def test_bad_policy_files_get_errors_naming_the_problem(
    tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "p.toml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_policies(tmp_path)


# Defect 14: malformed policy files are ConfigErrors naming the file, the field and the value
# (they were AttributeError, TypeError, OverflowError or UnicodeDecodeError).
MALFORMED_POLICIES: list[tuple[bytes, list[str]]] = [
    (b"tools = [1]\n", ["tools", "[1]", "[tools.NAME]"]),
    (b"approvals = 5\n", ["approvals", "5", "[[approvals]]"]),
    (b"defaults = 'x'\n", ["defaults", "'x'", "[defaults]"]),
    (b"[tools]\nrefund = 3\n", ["tools.refund", "3"]),
    (b'[defaults]\nescalate_after = "99999999999d"\n',
     ["defaults.escalate_after", "'99999999999d'", "at most"]),
    (b"[tools.x]\ntimeout = 1e300\n", ["tools.x.timeout", "1e+300", "at most"]),
    (b"[tools.x]\ntimeout = nan\n", ["tools.x.timeout", "nan"]),
    (b'[[approvals]]\ntool = "x"\nescalate_after = "100000000000h"\n',
     ["approvals[0].escalate_after", "'100000000000h'", "at most"]),
    (b"[tools.x]\nmax_attempts = 0\n", ["tools.x.max_attempts", "0", "greater than or equal to 1"]),
    (b"[tools.x]\nallowed_hosts = ['caf\xe9']\n", ["not UTF-8", "line 2", "0xe9"]),
    (b"[tools.x\n", ["invalid TOML", "line 1"]),
]  # fmt: skip


@pytest.mark.parametrize(("content", "parts"), MALFORMED_POLICIES)
def test_malformed_policy_files_name_file_field_and_value(
    tmp_path: Path, content: bytes, parts: list[str]
) -> None:
    (tmp_path / "p.toml").write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_policies(tmp_path)
    message = str(info.value)
    for part in [str(tmp_path / "p.toml"), *parts]:
        assert part in message


def test_an_error_names_the_file_it_is_in(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(
        "[tools.good]\nmax_attempts = 2\n[[approvals]]\ntool = 'good'\n"
    )
    (tmp_path / "b.toml").write_text(
        "[tools.bad]\nmax_attempts = 'many'\n[[approvals]]\ntool = 'bad'\nabove = 'x'\n"
    )
    with pytest.raises(ConfigError) as info:
        load_policies(tmp_path)
    b = tmp_path / "b.toml"
    assert str(info.value).splitlines() == [
        f"policy file {b}: tools.bad.max_attempts = 'many': Input should be a valid integer, "
        "unable to parse string as an integer",
        f"policy file {b}: approvals[0].above = 'x': Input should be a valid number, "
        "unable to parse string as a number",
    ]


@pytest.mark.parametrize("value", ["1e400", "99999999999d", float("inf"), float("nan")])
def test_durations_out_of_range_are_value_errors(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_a_tool_configured_in_two_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text("[tools.x]\nmax_attempts = 2\n")
    (tmp_path / "b.toml").write_text("[tools.x]\nmax_attempts = 3\n")
    with pytest.raises(ConfigError, match="configured twice"):
        load_policies(tmp_path)


def test_missing_policy_dir() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_policies("/nonexistent/policies")


def test_durations() -> None:
    assert parse_duration("72h") == timedelta(hours=72)
    assert parse_duration("250ms") == timedelta(milliseconds=250)
    assert parse_duration(5) == timedelta(seconds=5)
    with pytest.raises(ValueError):
        parse_duration("-3s")


def test_approval_rule_on_non_numeric_value_fails_closed() -> None:
    from agentq.policies import ApprovalRule

    rule = ApprovalRule(tool="t", field="amount", above=100)
    assert rule.applies({"amount": "lots"})
    assert rule.applies({})
    assert not rule.applies({"amount": 3})


class Args(BaseModel):
    n: int


def test_tool_decorator_requires_models() -> None:
    with pytest.raises(ConfigError, match="pydantic model"):

        @tool()
        def bad(ctx: ToolContext, args: dict) -> None:  # type: ignore[type-arg]
            pass

    with pytest.raises(ConfigError, match="invalid tool name"):
        tool("no spaces allowed")(lambda ctx, args: None)


def test_registry_loads_shipped_tools_and_validates() -> None:
    reg = ToolRegistry()
    names = {t.name for t in reg.load_dir(ROOT / "tools")}
    assert {"execute_refund", "request_approval", "escalate", "request_shipping"} <= names
    with pytest.raises(InvalidArguments, match=r"items: .*at least 1"):
        reg.get("request_shipping").validate_args(
            {"order_id": "o", "address": "12345", "items": []}
        )


def test_tool_module_that_fails_to_import_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match=r"broken.py failed to import: boom"):
        ToolRegistry().load_dir(tmp_path)


def test_tools_are_not_installed_as_a_top_level_package() -> None:
    import importlib.util

    ToolRegistry().load_dir(ROOT / "tools")
    assert importlib.util.find_spec("tools") is None or "site-packages" not in str(
        importlib.util.find_spec("tools")
    )
