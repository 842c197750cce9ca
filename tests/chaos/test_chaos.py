"""The bounded chaos runs (real time; usually 30-60 s, bounded by the config's
phases, which end on conditions): a step of .ci/run (``AGENTQ_CI_STEPS=1``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.controller import ChaosConfig, run_chaos

# Its phases end on conditions, each bounded (kill phase 30 s, plus up to 60 s for
# a kill right after a charge; settling up to 90 s): more than the suite's 300 s
# on a loaded machine.
# A step of .ci/run of its own (ci_step), beside the longer runs of python -m tests.chaos.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400), pytest.mark.ci_step]


def test_killed_and_frozen_workers_never_lose_double_or_double_charge(tmp_path: Path) -> None:
    # Bounded by the config, not by how fast this machine is: the kill phase ends
    # after 55 kills (15-30 s) once a worker died right after its charge (at most
    # 60 s more), the settle wait as soon as every decided task is final.
    report = run_chaos(tmp_path, ChaosConfig(seed=20261201))
    print(report.summary())
    assert report.ok, report.to_json()
    assert report.kills >= 50, report.summary()
    # The crash window that matters happened: killed after the charge, before the
    # answer; those tasks were delivered again and the API refused to charge twice.
    assert report.kills_after_charge >= 1, report.summary()
    assert report.freezes == 1, report.summary()
    assert report.redelivered >= 1 and report.duplicate_charges_prevented >= 1, report.summary()
    assert report.outcomes.get("succeeded", 0) >= 1 and report.cancels >= 1, report.summary()


def test_durable_runs_with_killed_workers_never_lose_a_run_or_ask_a_committed_turn_again(
    tmp_path: Path,
) -> None:
    # Runs beside the refunds (--runs), shorter: 10-15 s of kills once a worker
    # died while the model answered it and one right after a charge; the run's
    # turns wait out the 10 s lease of each killed worker while settling.
    report = run_chaos(
        tmp_path,
        ChaosConfig(seed=20261206, runs=8, min_kill_seconds=10.0, max_kill_seconds=15.0,
                    target_kills=25, charge_kill_wait=30.0, settle_seconds=60.0),
    )  # fmt: skip
    print(report.summary())
    assert report.ok, report.to_json()
    assert report.runs is not None and report.runs.runs >= 3, report.summary()
    assert report.kills_model_answering >= 1, report.summary()
    assert report.runs.outcomes.get("succeeded", 0) >= 1, report.summary()
    assert report.runs.lost == report.runs.stuck == report.runs.asked_again == 0
    assert report.runs.charged_twice == 0 and report.runs.model_answers >= 3, report.summary()
