"""One engine process's start-up recording, from the plugin's load to its file.

Every integration's timeline has the same life in each process of a launch: begun when
the plugin loads, phases added by the engine's hooks, the rank's session kept when verify
mode observes one, the process's own ready moment (its start-up work over) and, in the
process that serves, the launch's ready moment (the first 200 of the readiness probe),
and the file written at each, never raising into the engine.  :class:`ProcessRecording`
is that life; an integration's subclass names its engine's processes and functions.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from initorch.kit.session import RankSession
    from initorch.kit.timeline import ProcessRecorder
    from initorch.reporting.timeline import Timeline

__all__ = ["ProcessRecording"]


@dataclass
class ProcessRecording:
    """One process's recording: where it goes (``directory``), which process this is
    (``role``), and what only it knows (the rank's ``session``, the ``ready`` moments).

    A subclass sets :attr:`serving` (the role of the process that sees the others and
    the probe) and :attr:`log`, and names the process (:meth:`name`), the engine
    (:meth:`engine_label`, :meth:`integration`) and the engine function behind each
    step verify observed (:meth:`step_sources`)."""

    directory: str
    role: str
    recorder: ProcessRecorder
    session: RankSession | None = None
    ready: float | None = None
    process_ready: float | None = None
    _write_lock: threading.Lock = field(default_factory=threading.Lock)

    serving: ClassVar[str]
    log: ClassVar[logging.Logger]

    def name(self) -> str:
        raise NotImplementedError

    def engine_label(self) -> str:
        raise NotImplementedError

    def integration(self) -> str:
        raise NotImplementedError

    def step_sources(self, session: RankSession) -> dict[str, str | None]:
        raise NotImplementedError

    def answered(self, phase: str, began: float, answered: float, *, source: str | None,
                 detail: str) -> None:
        """The probe's first 200 (``began`` to ``answered``), recorded as ``phase``: the
        launch is ready.  The file is written off the engine's event loop (the ``/proc``
        walk and the write take milliseconds)."""
        with self.recorder.accounted():
            self.recorder.record(phase, began, answered, source=source, detail=detail)
            self.ready = self.process_ready = answered
        threading.Thread(target=self.write, name="initorch-timeline", daemon=True).start()
        self.log.info("%s: ready; the start-up timeline of this process is in %s",
                      self.integration(), self.directory)

    def write_up(self) -> None:
        """This process is up (its start-up work is over): note when, and write."""
        self.process_ready = time.time()
        self.write()

    def write(self) -> None:
        """Write this process's file, never raising into the engine: the start-up's
        outcome does not depend on its timeline, and a file that cannot be written (or
        made) is one warning line."""
        with self._write_lock:
            try:
                with self.recorder.accounted():
                    timeline = self._snapshot()
                self.recorder.write(self.directory, timeline)
            except Exception as error:  # reported; the engine goes on
                self.log.warning("%s: cannot write the start-up timeline to %s: %s: %s",
                                 self.integration(), self.directory, type(error).__name__,
                                 error)

    def _snapshot(self) -> Timeline:
        from initorch.kit.timeline import recorded_calls, unrecorded_processes

        processes, phases = unrecorded_processes(self.recorder.pid, time.time()) \
            if self.role == self.serving else ([], [])
        if self.session is not None:  # what verify mode observed, taken from its recorder
            phases = recorded_calls(self.session.recorder, self.step_sources(self.session))
        return self.recorder.snapshot(name=self.name(), argv=list(sys.orig_argv),
                                      ready=self.ready, process_ready=self.process_ready,
                                      others=(processes, phases),
                                      labels={"engine": self.engine_label()})
