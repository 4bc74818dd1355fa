"""A start-up timeline: the processes of a server, their threads, and the phases each
one went through, engine-neutral (``initorch run``'s own process, or every process
of an SGLang or vLLM launch recorded by an integration).

A :class:`Phase` is one named stretch of time on one thread of one process, with
the file:line of the code it stands for, and the phases it was declared to wait
for (``after``: a step's edges).  Times are wall-clock seconds (``time.time``), so
the phases of several processes on a host lie on one line.  What no one measured
is never guessed: :meth:`Timeline.with_gaps` fills every stretch of a process's
life that no phase covers with a phase marked ``measured=False`` ("not measured"),
so that a picture has no silent holes.

The critical chain (:meth:`Timeline.critical_chain`) is the chain that decided the
ready moment, walked back from it like ``systemd-analyze critical-chain``: by the
declared edges where a phase has them, otherwise by time (the phase, in any
process, that ended last before this one began).

The JSON form (:meth:`Timeline.to_dict`, :func:`timeline_from_dict`) is what
``initorch run --report`` embeds under ``"timeline"`` and what integrations write;
its ``format`` is :data:`FORMAT`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field, replace
from typing import Any

from initorch.errors import InitorchError
from initorch.records import record

FORMAT = "initorch-timeline/1"
NOT_MEASURED = "not measured"
MIN_GAP_S = 0.001
"""A stretch of a process's life shorter than this that no phase covers is drawn as
part of its neighbours (the bookkeeping between two steps), not as a gap."""

KINDS = ("process", "step", "teardown", "engine", NOT_MEASURED)
"""What a phase is: a stretch of a process's own start-up (``process``: interpreter,
imports, plugins, plan), a modelled ``step``, a ``teardown``, a phase of an engine
that initorch only observes (``engine``), or time no one measured."""


@record
class Phase:
    """One stretch of time on one thread of one process."""

    name: str
    process: int
    thread: str
    start: float
    end: float
    kind: str = "process"
    source: str | None = None  # file:line of the code the phase stands for
    status: str | None = None  # a step's or teardown's status
    after: tuple[str, ...] = ()  # the phases it was declared to wait for (same process)
    detail: str | None = None  # how it was measured, when that is not obvious

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def measured(self) -> bool:
        return self.kind != NOT_MEASURED

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "process": self.process,
                                "thread": self.thread, "start": round(self.start, 6),
                                "end": round(self.end, 6), "kind": self.kind}
        for key in ("source", "status", "detail"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.after:
            data["after"] = list(self.after)
        return data


@record
class Process:
    """One process of the server: its id, what people call it, its command line
    (redacted when written), where known, when it became ready, and the seconds the
    recording of its timeline cost inside it (``overhead``: measured there by the
    recorder, so that its share of the process's start-up can be stated)."""

    pid: int
    name: str
    argv: tuple[str, ...] = ()
    ready: float | None = None
    overhead: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"pid": self.pid, "name": self.name, "argv": list(self.argv)}
        if self.ready is not None:
            data["ready"] = round(self.ready, 6)
        if self.overhead is not None:
            data["overhead"] = round(self.overhead, 6)
        return data


@record(frozen=False)
class Timeline:
    """Processes and their phases; ``ready`` is the moment the whole was ready (the
    last process's, if none was given)."""

    processes: list[Process]
    phases: list[Phase]
    ready: float | None = None
    labels: dict[str, str] = field(default_factory=dict)  # what this start-up was

    @property
    def origin(self) -> float:
        """The earliest moment of the timeline (its zero)."""
        return min((phase.start for phase in self.phases), default=0.0)

    @property
    def end(self) -> float:
        return max((phase.end for phase in self.phases), default=0.0)

    def ready_at(self) -> float:
        """The moment the start-up was ready: the given one, else the latest
        process's, else the end of the last step or start-up phase."""
        if self.ready is not None:
            return self.ready
        ready = [process.ready for process in self.processes if process.ready is not None]
        if ready:
            return max(ready)
        startup = [p.end for p in self.phases if p.kind in ("process", "step", "engine")]
        return max(startup, default=self.end)

    def process(self, pid: int) -> Process:
        for process in self.processes:
            if process.pid == pid:
                return process
        raise KeyError(pid)

    def blame(self) -> list[Phase]:
        """Measured phases, longest first (``systemd-analyze blame``)."""
        return sorted((p for p in self.phases if p.measured), key=lambda p: -p.duration)

    def critical_chain(self) -> list[Phase]:
        """The phases that decided the ready moment, the last first: from the phase
        that ended last by then, back through its declared predecessor that ended
        last, or, without declared edges, the phase that ended last before it began."""
        ready = self.ready_at() + 1e-9
        candidates = [p for p in self.phases if p.end <= ready and p.kind != "teardown"]
        if not candidates:
            return []
        by_name = {(p.process, p.name): p for p in candidates}
        current = max(candidates, key=_latest_end)
        chain = [current]
        seen = {id(current)}  # zero-length phases at one moment must not loop
        while True:
            declared = [by_name[(current.process, name)] for name in current.after
                        if (current.process, name) in by_name]
            before = [p for p in declared or candidates
                      if p.end <= current.start + 1e-9 and id(p) not in seen]
            if not before:
                return chain
            current = max(before, key=_latest_end)
            chain.append(current)
            seen.add(id(current))

    def with_gaps(self) -> Timeline:
        """This timeline with every stretch of a process's life (from its first phase
        to its last) that no phase of any of its threads covers, :data:`MIN_GAP_S` or
        longer, as a "not measured" phase on its first thread."""
        filled = list(self.phases)
        for process in self.processes:
            own = sorted((p for p in self.phases if p.process == process.pid),
                         key=lambda p: p.start)
            if not own:
                continue
            covered_until = own[0].end
            for phase in own[1:]:
                if phase.start - covered_until >= MIN_GAP_S:
                    filled.append(Phase(NOT_MEASURED, process.pid, own[0].thread,
                                        covered_until, phase.start, kind=NOT_MEASURED))
                covered_until = max(covered_until, phase.end)
        return replace(self, phases=sorted(filled, key=lambda p: (p.process, p.start)))

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "labels": dict(self.labels),
                "ready": None if self.ready is None else round(self.ready, 6),
                "processes": [process.to_dict() for process in self.processes],
                "phases": [phase.to_dict() for phase in self.phases]}


def _latest_end(phase: Phase) -> tuple[float, float]:
    return phase.end, phase.start


RECORDED_IN = "recorded_in"
"""The label of a timeline recorded inside one process of a server (its pid): that
process as it recorded itself; the file's other processes are what it saw of them from
outside (``/proc``), which :func:`merge` keeps only for a process no file was recorded in."""


def merge(timelines: Iterable[Timeline]) -> Timeline:
    """One timeline of several (the ranks' reports, a launch's processes): a process
    seen twice keeps its first description, except that a process recorded in a file of
    its own (:data:`RECORDED_IN`) is described by that file alone; the ready moment is
    the latest one."""
    given = list(timelines)
    recorded = {t.labels[RECORDED_IN] for t in given if RECORDED_IN in t.labels}
    processes: dict[int, Process] = {}
    phases: list[Phase] = []
    readies: list[float] = []
    labels: dict[str, str] = {}
    for timeline in given:
        own = timeline.labels.get(RECORDED_IN)
        dropped = {process.pid for process in timeline.processes  # described elsewhere
                   if str(process.pid) != own and str(process.pid) in recorded}
        for process in timeline.processes:
            if process.pid not in dropped:
                processes.setdefault(process.pid, process)
        phases += [phase for phase in timeline.phases if phase.process not in dropped]
        if timeline.ready is not None:
            readies.append(timeline.ready)
        for key, value in timeline.labels.items():
            if key != RECORDED_IN:
                labels.setdefault(key, value)
    return Timeline(list(processes.values()), sorted(phases, key=lambda p: (p.process, p.start)),
                    max(readies) if readies else None, labels)


def timeline_from_dict(data: Mapping[str, Any], shown: str) -> Timeline:
    """A timeline from its JSON form; :class:`InitorchError` (exit 2) naming ``shown``
    (the file) when it is not one."""
    if data.get("format") != FORMAT:
        raise InitorchError(f"{shown}: not an initorch timeline (format is "
                            f"{data.get('format')!r}, not {FORMAT!r})",
                            hint="pass 'initorch run --report' files or timeline files")
    try:
        processes = [Process(int(p["pid"]), str(p["name"]), tuple(map(str, p.get("argv", ()))),
                             _optional_float(p.get("ready")), _optional_float(p.get("overhead")))
                     for p in data["processes"]]
        phases = [Phase(str(p["name"]), int(p["process"]), str(p["thread"]), float(p["start"]),
                        float(p["end"]), str(p.get("kind", "process")), p.get("source"),
                        p.get("status"), tuple(map(str, p.get("after", ()))), p.get("detail"))
                  for p in data["phases"]]
        labels = {str(k): str(v) for k, v in dict(data.get("labels") or {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise InitorchError(f"{shown}: a broken initorch timeline ({type(exc).__name__}: "
                            f"{exc})", hint="pass the files initorch wrote") from None
    unknown = sorted({p.kind for p in phases} - set(KINDS))
    if unknown:
        raise InitorchError(f"{shown}: unknown phase kind {unknown[0]!r}",
                            hint=f"a phase is one of: {', '.join(KINDS)}")
    return Timeline(processes, phases, _optional_float(data.get("ready")), labels)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def read_timeline(path: str) -> Timeline:
    """The timeline in ``path``: a timeline file, or a run report (``initorch run
    --report``) that embeds one; :class:`InitorchError` (exit 2) naming it otherwise."""
    from initorch.location import display_path
    from initorch.reporting.trace_merge import read_json_file

    hint = "pass 'initorch run --report' files or timeline files"
    data = read_json_file(path, "an initorch timeline", hint)
    if isinstance(data, dict) and isinstance(data.get("timeline"), dict):
        data = data["timeline"]
    if not isinstance(data, dict):
        raise InitorchError(f"{display_path(path)}: not an initorch timeline", hint=hint)
    return timeline_from_dict(data, display_path(path))
