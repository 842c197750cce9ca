"""The worker's numeric flags are range-checked when parsed (issue 27, item 16):
``agentq worker --concurrency 100000`` started a worker and ended in a
traceback. Parsing only: no worker is started."""

from __future__ import annotations

import pytest

from agentq.cli.main import build_parser


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "100000"], "--concurrency: must be at most 1024, got 100000"),
        (["--batch-size", "100000"], "--batch-size: must be at most 10000, got 100000"),
        (["--prefetch", "100000"], "--prefetch: must be at most 10000, got 100000"),
        (["--metrics-port", "70000"], "--metrics-port: must be at most 65535, got 70000"),
        (["--metrics-port", "-1"], "--metrics-port: must not be negative, got -1"),
        (["--concurrency", "x"], "--concurrency: expected an integer, got 'x'"),
    ],
)
def test_out_of_range_worker_flags_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["worker", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_in_range_flags_parse() -> None:
    args = build_parser().parse_args(
        ["worker", "--concurrency", "1024", "--batch-size", "10000", "--metrics-port", "0"]
    )
    assert (args.concurrency, args.batch_size, args.metrics_port) == (1024, 10000, 0)
