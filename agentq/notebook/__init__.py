"""agentq in a notebook: HTML views, run-until-idle on a fake clock, a DataFrame of
the ledger and a timeline plot.

The :class:`~agentq.runtime.Runtime` methods are the way in (``rt.tasks()`` and
``rt.approvals()`` show as tables, ``rt.run_until_idle()``, ``rt.tasks_frame()``,
``rt.plot_timeline()``, ``rt.queue_stats()``); the modules here hold the code:

* :mod:`agentq.notebook.html` — escaped, redacted ``_repr_html_`` views;
* :mod:`agentq.notebook.idle` — :func:`~agentq.notebook.idle.run_until_idle`;
* :mod:`agentq.notebook.frame` — the ledger as a pandas DataFrame;
* :mod:`agentq.notebook.timeline` — the matplotlib timeline.

pandas and matplotlib are optional: ``pip install 'agentq-runtime[notebook]'``.
"""
