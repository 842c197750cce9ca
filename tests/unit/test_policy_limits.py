"""Policy keys for rate limits and the Retry-After cap: validated at load, with
errors naming the file and the field (issue 9, defects 6 and 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq import ConfigError, load_policies


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("rate_limit_per_second = 0", "rate_limit_per_second"),
        ("rate_limit_per_second = -1", "rate_limit_per_second"),
        ("rate_limit_per_second = nan", "rate_limit_per_second"),
        ("rate_limit_per_second = inf", "rate_limit_per_second"),
        ("rate_limit_per_second = 1e-300", "rate_limit_per_second"),
        ("rate_limit_burst = 0", "rate_limit_burst"),
        ("rate_limit_burst = 1.5", "rate_limit_burst"),
        ("max_retry_after = 0", "max_retry_after"),
        ("max_retry_after = 'soon'", "max_retry_after"),
        ("max_retry_after = '400d'", "max_retry_after"),
    ],
)
def test_bad_limits_are_refused_naming_file_and_field(
    tmp_path: Path, setting: str, field: str
) -> None:
    path = tmp_path / "limits.toml"
    path.write_text(f"[tools.x]\n{setting}\n")
    with pytest.raises(ConfigError, match=field) as info:
        load_policies(tmp_path)
    assert str(path) in str(info.value)


def test_default_cap_is_refused_when_bad(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text("[defaults]\nmax_retry_after = -3\n")
    with pytest.raises(ConfigError, match="max_retry_after"):
        load_policies(tmp_path)


def test_limits_load(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(
        "[defaults]\nmax_retry_after = '30m'\n"
        "[tools.slow]\nrate_limit_per_second = 0.1\n"
        "[tools.fast]\nrate_limit_per_second = 1000\nrate_limit_burst = 50\n"
        "max_retry_after = '2h'\n"
    )
    policy = load_policies(tmp_path)
    assert policy.for_tool("slow").rate_limit_per_second == 0.1
    assert policy.rate_limit("slow") == (0.1, 1)  # a burst of one second's calls, at least 1
    assert policy.rate_limit("fast") == (1000, 50)
    assert policy.rate_limit("unlimited") is None
    assert policy.max_retry_after("fast") == 7200
    assert policy.max_retry_after("slow") == 1800


def test_default_cap_is_one_hour(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text("[tools.x]\nrate_limit_per_second = 2.5\n")
    policy = load_policies(tmp_path)
    assert policy.max_retry_after("x") == 3600
    assert policy.rate_limit("x") == (2.5, 2)
