"""``agentq prune``: delete finished tasks past their retention, now.

Workers prune by themselves; this is the same pass on demand (a cron job, a
database that no worker serves, or ``--older-than`` to clear more than the
configured retention). ``--vacuum`` then rebuilds a SQLite file with
incremental auto-vacuum: the one-time conversion of a database created before
agentq turned it on (stop the workers first: it holds the write lock while
SQLite copies the file).
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agentq.cli.common import (
    add_db_args,
    args_config,
    config_retention,
    positive,
    require_database,
    resolve_db,
)
from agentq.cli.output import print_json
from agentq.errors import ConfigError

if TYPE_CHECKING:
    from agentq.lifecycle.retention import PruneCounts, RetentionRules
    from agentq.runtime import PruneReport, Runtime

__all__ = ["register"]

#: Seconds between two batches: workers on the database keep their turns.
_PAUSE = 0.01
#: An ``--older-than`` below this deletes what just finished (a typo of ``1d``?):
#: it asks for ``--yes`` when there is anything to delete. Above it, ``--yes`` is
#: asked for when it would delete tasks the retention setting keeps. A configured
#: retention below it asks too.
_ASK_BELOW = timedelta(hours=1)


def register(sub: Any) -> None:
    """Add ``agentq prune``."""
    p = sub.add_parser(
        "prune",
        help="delete finished tasks past their retention",
        description=(
            "Delete finished tasks (succeeded, cancelled, and dead ones whose "
            "dead-letter entry was deleted) older than their retention, with their "
            "approvals, idempotency keys, out-of-band arguments and audit entries, "
            "and the dedupe keys, per-key slot records and worker records no longer "
            "needed, a small batch per transaction, and print the counts per kind. "
            "Unfinished tasks are never deleted."
        ),
    )
    add_db_args(p)
    p.add_argument(
        "--older-than", metavar="DURATION",
        help="delete what finished more than DURATION ago (e.g. 30d, 12h, 0s), for every "
        "tool, instead of the configured retention",
    )  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="count only; delete nothing")
    p.add_argument(
        "--yes", action="store_true",
        help="delete what --older-than asks even when it is more than the retention keeps, "
        "or anything at all below 1h, or what a configured retention below 1h deletes "
        "(asked for when it would)",
    )  # fmt: skip
    p.add_argument(
        "--vacuum", action="store_true",
        help="then rebuild a SQLite file with incremental auto-vacuum (converts an older "
        "database; stop the workers first)",
    )  # fmt: skip
    p.add_argument("--batch-size", type=positive, default=200, metavar="N",
                   help="records per transaction (default: 200)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=_cmd_prune)


def _older_than(text: str | None) -> timedelta | None:
    if text is None:
        return None
    from agentq.policies import parse_duration

    try:
        return parse_duration(text)
    except (ValueError, OverflowError) as exc:
        raise ConfigError(f"--older-than: {exc}") from exc


def _open(args: argparse.Namespace) -> Runtime:
    """The database, with the configured retention and the policy its workers
    recorded (per-tool ``retention``): no tools folder is needed."""
    from agentq.runtime import Runtime

    config = args_config(args)
    db = resolve_db(args, config)
    require_database(db)
    args.db = db
    rt = Runtime(db, retention=config_retention(config))
    if config.agentq.audit_retention is not None:
        rt.audit_retention = config.agentq.audit_retention
    return rt


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def _cmd_prune(args: argparse.Namespace) -> int:
    older_than = _older_than(args.older_than)
    if args.vacuum and args.dry_run:
        raise ConfigError("--vacuum and --dry-run cannot be combined")
    rt = _open(args)
    try:
        vacuum = getattr(rt.backend, "vacuum", None)
        if args.vacuum and vacuum is None:
            raise ConfigError(
                f"--vacuum is for SQLite databases; {rt.backend.url} manages its own storage"
            )
        rules = rt.retention_rules(older_than)
        if rules.shortest is None:
            print("retention is off for every tool: nothing to prune (use --older-than)")
            report = None
        else:
            if older_than is not None:
                _confirmed(args, rt, older_than)
            else:
                _confirmed_retention(args, rt, rules)
            report = rt.prune(
                older_than=older_than, dry_run=args.dry_run, batch_size=args.batch_size,
                pause=_PAUSE,
            )  # fmt: skip
        sizes = vacuum() if args.vacuum and vacuum is not None else None
        if args.json:
            print_json(_document(report, sizes))
            return 0
        if report is not None:
            _print_report(report, rules, older_than is not None)
        if sizes is not None:
            before, after = sizes
            print(f"vacuumed: {_mib(before.size)} -> {_mib(after.size)} "
                  f"(auto_vacuum: {before.auto_vacuum} -> {after.auto_vacuum})")  # fmt: skip
        return 0
    finally:
        rt.close()


def _confirmed(args: argparse.Namespace, rt: Runtime, older_than: timedelta) -> None:
    """Refuse an ``--older-than`` that would delete tasks the retention setting
    keeps, or below an hour anything at all, unless ``--yes`` (or ``--dry-run``)
    says it is meant, saying what it would delete."""
    if args.yes or args.dry_run:
        return
    counts = rt.prune(older_than=older_than, dry_run=True, batch_size=args.batch_size).counts
    if not counts.total:
        return
    if older_than < _ASK_BELOW:
        raise ConfigError(
            f"--older-than {args.older_than} would delete {_summary(counts)}, some finished "
            f"less than an hour ago; add --yes to delete them (--dry-run to count only)"
        )
    rules = rt.retention_rules()
    kept = 0
    if rules.shortest is not None:
        kept = rt.prune(dry_run=True, batch_size=args.batch_size).counts.tasks
    beyond = counts.tasks - kept
    if beyond > 0:
        raise ConfigError(
            f"--older-than {args.older_than} would delete {_summary(counts)}, {beyond} more "
            f"than the retention ({_retention(rules)}) allows; add --yes to delete them "
            f"(--dry-run to count only)"
        )


def _confirmed_retention(args: argparse.Namespace, rt: Runtime, rules: RetentionRules) -> None:
    """As :func:`_confirmed` for ``--older-than`` below an hour: a configured
    retention (``agentq.toml``, a tool's policy) below an hour deletes what
    just finished, and its audit when ``audit_retention`` is as short, so it
    asks for ``--yes`` (or ``--dry-run``) when there is anything to delete."""
    if args.yes or args.dry_run or rules.shortest is None or rules.shortest >= _ASK_BELOW:
        return
    counts = rt.prune(dry_run=True, batch_size=args.batch_size).counts
    if counts.total:
        raise ConfigError(
            f"the configured retention ({_retention(rules)}) would delete {_summary(counts)}; "
            "it keeps finished tasks less than an hour: add --yes to delete them "
            "(--dry-run to count only)"
        )


def _retention(rules: RetentionRules) -> str:
    """The retention setting in a few words: ``7d``, ``off``, with per-tool ones."""
    from agentq.policies import format_duration

    def shown(keep: timedelta | None) -> str:
        return "off" if keep is None else format_duration(keep)

    tools = ", ".join(f"{name} {shown(keep)}" for name, keep in sorted(rules.tools.items()))
    return shown(rules.default) + (f"; per tool: {tools}" if tools else "")


def _summary(c: PruneCounts) -> str:
    return (
        f"{c.tasks} task(s), {c.approvals} approval(s), {c.idempotency_keys} "
        f"idempotency key(s), {c.audit_entries} audit entry(ies), {c.payloads} out-of-band "
        f"argument(s), {c.dedupe_keys} dedupe key(s), {c.key_slots} key slot record(s), "
        f"{c.worker_records} worker record(s), {c.runs} agent run(s), {c.run_usage} "
        "run usage record(s)"
    )


def _print_report(report: PruneReport, rules: RetentionRules, explicit: bool) -> None:
    c = report.counts
    verb = "would delete" if report.dry_run else "deleted"
    print(f"{verb} {_summary(c)}")
    setting = _retention(rules)
    if explicit:  # --older-than: one duration, for every tool
        setting += " (--older-than, every tool)"
    when = report.now.isoformat(timespec="seconds") if report.now else "-"
    print(f"retention: {setting}; as of {when}")
    if report.reclaimed_bytes:
        print(f"gave back {_mib(report.reclaimed_bytes)} to the file system")


def _document(report: PruneReport | None, sizes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"pruned": None}
    if report is not None:
        out["pruned"] = {
            **report.counts.as_dict(), "dry_run": report.dry_run, "as_of": report.now,
            "reclaimed_bytes": report.reclaimed_bytes,
        }  # fmt: skip
    if sizes is not None:
        before, after = sizes
        out["vacuum"] = {"bytes_before": before.size, "bytes_after": after.size,
                         "auto_vacuum": after.auto_vacuum}  # fmt: skip
    return out
