"""Chaos: worker processes SIGKILLed at random while an agent decides refunds.

``python -m tests.chaos --minutes N`` runs for longer than the bounded test
(``tests/chaos/test_chaos.py``) and prints kills, tasks, lost, doubled and charged
twice. See :mod:`tests.chaos.controller` for what happens and
:mod:`tests.chaos.checks` for what must hold.
"""
