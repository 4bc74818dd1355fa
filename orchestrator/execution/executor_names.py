"""The executors a run is given by name, and the parallel one's thread cap: what the CLI
offers (``--executor``, ``--workers``) and :func:`~initorch.execution.executors.make_executor`
accepts, apart from the executors so that declaring the options imports none of them
(a dry run never does)."""

from __future__ import annotations

EXECUTORS = ("sequential", "parallel", "dry-run")
"""Every executor's name, as ``--executor`` and ``Run(executor=...)`` take it."""

DEFAULT_MAX_WORKERS = 256
"""The parallel executor's cap on threads when none is given.  Steps that wait (on
I/O, a rendezvous, a native call that releases the GIL) cost a thread each and
no CPU, so the executor starts a thread for every step that is ready, up to this
many: 200 independent 0.2 s waits take about 0.2 s, not 200 / workers rounds.
The cap only keeps a plan of thousands of independent steps from starting
thousands of threads."""
