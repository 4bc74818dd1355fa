"""A server's start-up timeline, recorded from inside each of its processes.

An integration's plugin is loaded by the engine in several processes of one launch (the
launcher and API server, the ranks, a detokenizer); each records its own phases on its
own threads with a :class:`ProcessRecorder` and writes them, as a timeline file of the
core's format (:mod:`initorch.reporting.timeline`), into a directory the launch names.
:func:`read_launch` joins the files of that directory into the launch's timeline, and
:func:`render_launch` shows it as the core does (text, trace, picture).

What each process can and cannot know is kept apart, never guessed:

- its own start is the kernel's (``/proc/<pid>/stat``), known to one clock tick; from
  there to the plugin's load the interpreter starts and the engine imports itself, and
  no code of initorch runs in between to tell the two apart
  (:meth:`ProcessRecorder.interpreter_and_imports`);
- a phase is one call of an engine function, wrapped by an ``around`` hook
  (:meth:`ProcessRecorder.around`) and named after that function, with its file:line,
  or one call the kit's :class:`~initorch.kit.recorder.Recorder` already observed
  (:func:`recorded_calls`: what verify mode records is reused, not recorded twice);
- a process that loads no plugin (a resource tracker, a helper) is seen from ``/proc``
  only: its start and command line, and the rest of its life "not measured"
  (:func:`unrecorded_processes`);
- the ready moment is when the server first answered its readiness probe, seen in the
  API server's ASGI app (:class:`FirstAnswer`).

The recording's own time is measured where it is spent (``ProcessRecorder.overhead``,
``perf_counter`` around its own bookkeeping, the ``/proc`` reads and the writes) and
written with the process, so that its share of the process's start-up can be stated.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from initorch.reporting.process_marks import ProcessStart, process_start
from initorch.reporting.timeline import NOT_MEASURED, RECORDED_IN, Phase, Process, Timeline

if TYPE_CHECKING:
    from initorch.kit.recorder import Recorder

__all__ = ["FILE_PATTERN", "FirstAnswer", "ProcessRecorder", "caller_outside", "code_source",
           "compare_launch", "descendants", "read_launch", "recorded_calls", "render_launch",
           "unrecorded_processes", "watch_first_answer", "written_ready"]

FILE_PATTERN = "process-{pid}.json"
"""The name of one process's timeline file in the launch's directory."""


def code_source(function: Any) -> str | None:
    """``file:line`` of ``function``'s code (a hook's original, a class's ``__init__``),
    the file shown as :func:`~initorch.location.display_path` does
    (``<site-packages>/<engine>/...``); ``None`` for what has no Python code."""
    from initorch.location import display_path

    function = getattr(function, "__func__", function)
    while hasattr(function, "__wrapped__"):  # a hook's wrapper: the engine's own function
        function = function.__wrapped__
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    return f"{display_path(code.co_filename)}:{code.co_firstlineno}"


class ProcessRecorder:
    """The phases of this process's start-up, each on the thread that ran it, in
    wall-clock seconds (the clock every process of a host shares).

    Thread-safe; the time of its own bookkeeping adds up in :attr:`overhead`."""

    def __init__(self) -> None:
        began = time.perf_counter()
        self.pid = os.getpid()
        self.start: ProcessStart | None = process_start()
        self.phases: list[Phase] = []
        self.overhead = 0.0
        self._open: dict[int, Phase] = {}  # the phases running now, by a key of their own
        self._keys = itertools.count()
        self._lock = threading.Lock()
        self._account(began)

    def _account(self, since: float) -> None:
        spent = time.perf_counter() - since
        with self._lock:
            self.overhead += spent

    def add(self, phase: Phase) -> None:
        with self._lock:
            self.phases.append(phase)

    def record(self, name: str, start: float, end: float, *, kind: str = "engine",
               source: str | None = None, detail: str | None = None) -> None:
        """Phase ``name`` on this thread, between two moments measured apart (a
        request's arrival and its answer; the plugin's load, once it is over)."""
        self.add(Phase(name, self.pid, threading.current_thread().name, start, end,
                       kind=kind, source=source, detail=detail))

    @contextmanager
    def accounted(self) -> Iterator[None]:
        """Count the block as the recording's own time (a file written, ``/proc`` read)."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self._account(began)

    def interpreter_and_imports(self, until: float, source: str | None) -> None:
        """The stretch from the kernel's start of this process to ``until`` (the plugin's
        load), which the engine's code at ``source`` began: the interpreter's start and
        the engine's imports, not told apart."""
        if self.start is None:
            return  # no /proc: the stretch is not measured, and shows as such
        self.add(Phase("interpreter start and imports", self.pid,
                       threading.current_thread().name, self.start.at, until, kind="process",
                       source=source,
                       detail=f"from the kernel's start time (/proc/{self.pid}/stat, known "
                              f"to {self.start.resolution * 1000:g} ms) to the plugin's load: "
                              "the interpreter's start and the engine's imports, which no "
                              "code of initorch runs between to tell apart"))

    @contextmanager
    def phase(self, name: str, *, kind: str = "engine", source: str | None = None,
              detail: str | None = None) -> Iterator[None]:
        """Record the block as phase ``name`` on this thread; a block that raises is
        ``failed``.  While it runs the phase is open (:meth:`snapshot` shows it running)."""
        entered = time.perf_counter()
        key = next(self._keys)
        opened = Phase(name, self.pid, threading.current_thread().name, time.time(),
                       time.time(), kind=kind, source=source, status="running", detail=detail)
        with self._lock:
            self._open[key] = opened
        self._account(entered)
        status = "succeeded"
        try:
            yield
        except BaseException:
            status = "failed"
            raise
        finally:
            resumed = time.perf_counter()
            with self._lock:
                del self._open[key]
                self.phases.append(Phase(name, self.pid, opened.thread, opened.start,
                                         time.time(), kind=kind, source=source,
                                         status=None if status == "succeeded" else status,
                                         detail=detail))
            self._account(resumed)

    def around(self, name: str | None = None, *, kind: str = "engine",
               detail: str | None = None,
               then: Callable[[], None] | None = None) -> Callable[..., Any]:
        """An ``around`` hook (:func:`~initorch.kit.hooks.apply_hooks`) that records each
        call of its target as a phase named ``name`` (default: the target's qualified
        name), with the target's file:line; ``then`` runs after each call (a file to
        write once the phase is over), on the recording's account."""

        def record(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            shown = name or str(getattr(original, "__qualname__", original))
            try:
                with self.phase(shown, kind=kind, source=code_source(original), detail=detail):
                    return original(*args, **kwargs)
            finally:
                if then is not None:
                    then()

        return record

    def snapshot(self, *, name: str, argv: list[str], ready: float | None = None,
                 process_ready: float | None = None,
                 others: tuple[list[Process], list[Phase]] = ([], []),
                 labels: MutableMapping[str, str] | None = None) -> Timeline:
        """This process's timeline as of now: its phases, those still open as
        ``running`` up to now, and ``others``: what it saw of other processes, and phases
        of its own that another recorder kept.  The overhead written is the recording's
        time so far."""
        now = time.time()
        with self._lock:
            phases = list(self.phases)
            phases += [dataclasses.replace(p, end=now) for p in self._open.values()]
            overhead = self.overhead
        process = Process(self.pid, name, tuple(argv), process_ready, overhead)
        return Timeline([process, *others[0]], sorted(phases + others[1], key=_by_start),
                        ready, {**(labels or {}), RECORDED_IN: str(self.pid)})

    def write(self, directory: str | os.PathLike[str], timeline: Timeline) -> Path:
        """Write ``timeline`` (redacted) as this process's file in ``directory``,
        atomically (written beside it, then renamed): a reader sees the last whole file."""
        from initorch.files import write_atomically
        from initorch.reporting.redaction import redact

        with self.accounted():
            path = Path(directory) / FILE_PATTERN.format(pid=self.pid)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, json.dumps(redact(timeline.to_dict()), indent=1) + "\n")
        return path


def caller_outside(*folders: str) -> tuple[str, str | None]:
    """The function (and its file:line) that called into the code of ``folders`` (path
    fragments, such as an integration's package folder and the engine's plugin
    loader): the first frame up the stack above the outermost one in any of them or in
    ``importlib`` (an entry point's loader), that is, which of its functions an engine
    loaded a plugin from, which tells its processes apart.  A wrapper between the
    loader and the plugin (a profiler's, a bench probe's) is below that frame, so it
    is passed over."""
    from initorch.location import display_path

    skipped = (*folders, "/importlib/")
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back  # type: ignore[assignment]
    names = [f.f_code.co_filename.replace(os.sep, "/") for f in frames]
    inside = [i for i, name in enumerate(names) if any(folder in name for folder in skipped)]
    for index in range(inside[-1] + 1 if inside else 0, len(frames)):
        if not any(folder in names[index] for folder in skipped):
            found = frames[index]
            return found.f_code.co_name, f"{display_path(names[index])}:{found.f_lineno}"
    return "?", None


def _by_start(phase: Phase) -> tuple[int, float]:
    return phase.process, phase.start


def recorded_calls(recorder: Recorder, sources: MutableMapping[str, str | None]) -> list[Phase]:
    """The calls a verify-mode :class:`~initorch.kit.recorder.Recorder` observed, as
    phases of this process: each step's calls (a second call named ``step (call 2)``),
    with the plan's edges into the step, and below them the vendor calls, on the
    threads that made them.  ``sources`` maps a step to the file:line of the engine
    function that performs it."""
    pid = os.getpid()
    origin = time.time() - recorder.elapsed()  # the recorder's clock is perf_counter
    graph = recorder.plan.graph
    phases = []
    for call in recorder.calls:
        end = call.finished if call.finished is not None else recorder.elapsed()
        first = call.index == 0
        phases.append(Phase(call.step if first else f"{call.step} (call {call.index + 1})",
                            pid, call.thread, origin + call.started, origin + end,
                            kind="step", source=sources.get(call.step),
                            status="failed" if call.error is not None else None,
                            after=graph.predecessors(call.step)
                            if first and call.step in recorder.plan else (),
                            detail="observed by verify mode"))
    for record in recorder.vendor_calls:
        end = record.finished if record.finished is not None else recorder.elapsed()
        phases.append(Phase(record.call.label, pid, record.thread, origin + record.started,
                            origin + end, kind="engine", source=record.site.where(),
                            status="failed" if record.error is not None else None,
                            detail=f"a vendor call made while {record.step} ran"))
    return phases


def descendants(root: int) -> list[int]:
    """The processes below ``root`` (children, theirs...), from ``/proc``; empty off
    Linux."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(entry))
    found, pending = [], list(children.get(root, []))
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, [])
    return sorted(found)


def _command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            words = cmdline.read().split(b"\0")
    except OSError:
        return []
    return [word.decode(errors="replace") for word in words if word]


def unrecorded_processes(root: int, until: float) -> tuple[list[Process], list[Phase]]:
    """The processes below ``root`` as ``/proc`` shows them: each one's start (the
    kernel's) and command line, and its life up to ``until`` as "not measured".  A
    process that records itself replaces this view of it (:func:`read_launch`)."""
    processes, phases = [], []
    for pid in descendants(root):
        started = process_start(pid)
        argv = _command_line(pid)
        if started is None or not argv:
            continue  # gone before it could be read
        processes.append(Process(pid, f"{Path(argv[0]).name} (seen from /proc)", tuple(argv)))
        phases.append(Phase(NOT_MEASURED, pid, "?", started.at, max(until, started.at),
                            kind=NOT_MEASURED, source=f"/proc/{pid}/stat starttime",
                            detail="no initorch plugin loads in this process: its start is "
                                   "the kernel's, the rest of its life is not measured"))
    return processes, phases


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]


class FirstAnswer:
    """ASGI middleware that notes when an app first answered ``GET path`` with 200 (a
    readiness probe: ``/health_generate``, ``/health``), and otherwise passes every
    request through untouched; after that first answer it only passes through.

    Added with Starlette's ``app.add_middleware(FirstAnswer, path=..., answered=...)``
    before the app starts; ``answered(began, answered)`` gets the request's arrival and
    the moment its 200 was sent (wall-clock seconds), once."""

    def __init__(self, app: App, *, path: str, answered: Callable[[float, float], None]) -> None:
        self.app = app
        self.path = path
        self.answered = answered
        self.done = False

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if self.done or scope.get("type") != "http" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        began = time.time()

        async def watch(message: dict[str, Any]) -> None:
            await send(message)
            if message.get("type") == "http.response.start" and message.get("status") == 200 \
                    and not self.done:
                self.done = True
                self.answered(began, time.time())

        await self.app(scope, receive, watch)


def watch_first_answer(app: Any, *, path: str, answered: Callable[[float, float], None]) -> None:
    """Watch Starlette ``app`` for its first 200 to ``GET path`` (:class:`FirstAnswer`),
    whether or not its middleware stack is built yet: an app whose engine built its
    stack before handing it over refuses ``add_middleware``, so there the built stack
    is wrapped, which is what ``add_middleware`` would have led to."""
    if getattr(app, "middleware_stack", None) is None:
        app.add_middleware(FirstAnswer, path=path, answered=answered)
    else:
        app.middleware_stack = FirstAnswer(app.middleware_stack, path=path, answered=answered)


def written_ready(directory: str | os.PathLike[str], pid: int) -> float | None:
    """The ready moment process ``pid`` has written into its file in ``directory`` so
    far (``None``: no file yet, or not ready in it): what a caller polls before it stops
    a server whose API process writes the moment just after answering."""
    try:
        data = json.loads((Path(directory) / FILE_PATTERN.format(pid=pid)).read_text())
    except (OSError, ValueError):
        return None  # not written yet (a file is replaced whole, never seen half-written)
    ready = data.get("ready") if isinstance(data, dict) else None
    return float(ready) if isinstance(ready, (int, float)) else None


def read_launch(directory: str | os.PathLike[str]) -> Timeline:
    """The launch's timeline from the process files in ``directory`` (merged by the
    core: each process as it recorded itself, one no file was recorded in as another
    process saw it from ``/proc``), its processes in the order they started;
    :class:`~initorch.errors.InitorchError` (exit 2) when there are none or one is not a
    timeline."""
    from initorch.errors import InitorchError
    from initorch.location import display_path
    from initorch.reporting.timeline import merge, read_timeline

    files = sorted(Path(directory).glob(FILE_PATTERN.format(pid="*")))
    if not files:
        raise InitorchError(f"{display_path(directory)}: no process timelines "
                            f"({FILE_PATTERN.format(pid='<pid>')})",
                            hint="name this directory in the launch's timeline variable "
                                 "and start the server")
    merged = merge(read_timeline(str(path)) for path in files)
    merged.processes.sort(key=lambda process: min(
        (p.start for p in merged.phases if p.process == process.pid), default=0.0))
    return merged


def compare_launch(before: Timeline, after: Timeline) -> str:
    """What got slower from the launch ``before`` to ``after``, phase by phase (the
    core's ``--compare``)."""
    from initorch.reporting.timeline_text import compare_text

    return compare_text(before, after)


def render_launch(timeline: Timeline, *, trace: str | os.PathLike[str] | None = None,
                  plot: str | os.PathLike[str] | None = None,
                  title: str = "start-up timeline") -> str:
    """The launch's timeline as the core renders one: the text (blame and critical
    chain) returned, the merged Chrome/Perfetto trace written to ``trace``, the picture
    to ``plot`` (a self-contained HTML page, and the SVG alone beside it, ``.svg``);
    redacted as data before any renderer sees it, each file written atomically."""
    from initorch.files import write_atomically
    from initorch.reporting.redaction import redact
    from initorch.reporting.timeline import timeline_from_dict
    from initorch.reporting.timeline_plot import timeline_html, timeline_svg
    from initorch.reporting.timeline_text import timeline_text
    from initorch.reporting.timeline_trace import timeline_trace

    clean = timeline_from_dict(redact(timeline.to_dict()), "the launch's timeline")
    if trace is not None:
        write_atomically(trace, json.dumps(timeline_trace(clean), indent=1) + "\n")
    if plot is not None:
        write_atomically(plot, timeline_html(clean, title))
        write_atomically(Path(plot).with_suffix(".svg"), timeline_svg(clean))
    return timeline_text(clean)
