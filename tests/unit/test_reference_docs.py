"""docs/reference/ is generated from the pydantic models and cannot drift from them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from agentq.attribute_docs import field_docs
from agentq.config import Config
from agentq.policies import ApprovalRule, Defaults, ToolPolicy, load_policies
from agentq.reference import REFERENCES, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("relative", sorted(REFERENCES))
def test_the_committed_reference_is_what_the_models_generate(relative: str) -> None:
    committed = (ROOT / relative).read_text(encoding="utf-8")
    assert committed == REFERENCES[relative](), (
        f"{relative} is out of date: run `python -m agentq.reference`"
    )


def test_every_key_of_every_model_is_documented() -> None:
    text = (ROOT / "docs/reference/policies.md").read_text(encoding="utf-8")
    for model in (Defaults, ToolPolicy, ApprovalRule):
        for key, doc in field_docs(model).items():
            assert f"| `{key}` |" in text
            assert doc, f"{model.__name__}.{key} has no docstring to document"


def test_check_reports_a_stale_file_and_writing_fixes_it(tmp_path: Path) -> None:
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--check", "--root", str(tmp_path)]) == 0


def _toml_blocks(relative: str) -> list[str]:
    text = (ROOT / relative).read_text(encoding="utf-8")
    return re.findall(r"^```toml\n(.*?)^```", text, re.S | re.M)


def test_the_examples_in_the_references_are_valid(tmp_path: Path) -> None:
    (policy,) = _toml_blocks("docs/reference/policies.md")
    (tmp_path / "example.toml").write_text(policy, encoding="utf-8")
    assert load_policies(tmp_path).approvals[0].above == 100
    (config,) = _toml_blocks("docs/reference/config.md")
    assert Config.model_validate(tomllib.loads(config)).agentq.tools == "tools"
