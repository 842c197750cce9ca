"""Fixtures shared by several suites: the Cloud Spanner emulator (see
``tests/spanner_emulator``) for the conformance, runtime and emulator tests."""

from tests.spanner_emulator.fixtures import (
    emulator_database,
    emulator_database_factory,
    spanner_emulator,
)

__all__ = ["emulator_database", "emulator_database_factory", "spanner_emulator"]
