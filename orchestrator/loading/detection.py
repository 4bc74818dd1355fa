"""Which device profile fits this machine: ``--profile auto``, and no ``--profile`` at all.

The core knows no device.  Plugins register :class:`DeviceProbe` objects (the
built-in ones are ``initorch.steps.detect``: package specs, runtime libraries,
device nodes, visible-devices variables); :func:`detect` asks each in priority
order -- lower first, and the built-ins document theirs -- and the first that
fits is chosen.  Every candidate says why it was taken or rejected, and a probe
that raises is a rejection with its error, never a crash.

A *static* probe (the default, and what ``plan`` and ``run`` use) imports
nothing: ``initorch plan --profile auto`` stays a dry run, and a run's profile
``env:`` is still applied before torch or a vendor plugin is first imported.
A *deep* probe (``initorch detect --import``) also imports the candidate's
packages and counts the devices it sees, up to the chosen candidate.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from initorch.errors import RunInterrupted
from initorch.records import record

Status = Literal["chosen", "rejected", "fits", "not probed"]


DEEP_PROBE_TIMEOUT_S = 60.0
"""How long a deep probe may take to import a candidate's packages and count its
devices: a vendor package whose import never ends (a driver waiting for a device that
is not there) is a rejection that says where it hung, not a command that waits for
ever."""
PROBE_GRACE_S = 2.0
"""How much longer than that a deep probe's thread is waited for: a probe that bounds its
own imports (the built-ins stop a child process) answers first, with what it knows."""


@record
class Machine:
    """Where probes look: device nodes and libraries under ``root`` (``/``, or a host
    mounted into a container, or a test's stand-in), this ``environ``, this OS; and how
    long a deep probe may spend importing (``detect`` sets it from its ``timeout_s``)."""

    root: Path = Path("/")
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    system: str = field(default_factory=lambda: platform.system().lower())
    arch: str = field(default_factory=lambda: platform.machine().lower())
    import_timeout_s: float = DEEP_PROBE_TIMEOUT_S

    def path(self, absolute: str | os.PathLike[str]) -> Path:
        """``absolute`` (a path on the machine) as seen from here, under ``root``."""
        return self.root / str(absolute).lstrip("/")


@record
class Verdict:
    """A probe's answer: whether the device fits, and why (or why not), one reason each."""

    fits: bool
    reasons: tuple[str, ...]


@runtime_checkable
class DeviceProbe(Protocol):
    """Finds out whether this machine has ``device`` (a profile's ``device.type``)."""

    @property
    def device(self) -> str: ...

    @property
    def priority(self) -> int: ...

    def probe(self, machine: Machine, deep: bool) -> Verdict: ...


@record
class Candidate:
    """One device as detection saw it."""

    device: str
    priority: int
    status: Status
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"device": self.device, "priority": self.priority, "status": self.status,
                "reasons": list(self.reasons)}


@record
class Detection:
    """Every candidate in priority order; ``chosen`` is the device type that fits first."""

    candidates: tuple[Candidate, ...]
    deep: bool

    @property
    def chosen(self) -> str | None:
        return next((c.device for c in self.candidates if c.status == "chosen"), None)

    def table(self) -> str:
        """What ``initorch detect`` prints: one row per candidate, then the choice."""
        width = max([len(c.device) for c in self.candidates] + [6])
        lines = [f"{'device':<{width}}  {'result':<10}  why"]
        for candidate in self.candidates:
            lines.append(f"{candidate.device:<{width}}  {candidate.status:<10}  "
                         f"{'; '.join(candidate.reasons)}")
        how = "packages imported, devices counted" if self.deep else \
            "static: nothing imported; --import also counts devices"
        chosen = self.chosen
        lines += ["", f"chosen: {chosen if chosen else 'none'} ({how})"]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        return {"chosen": self.chosen, "deep": self.deep,
                "candidates": [c.to_dict() for c in self.candidates]}


class ProbeCatalog:
    """The registered probes; one per device type."""

    def __init__(self) -> None:
        self._probes: dict[str, DeviceProbe] = {}

    def add(self, probe: DeviceProbe) -> None:
        from initorch.errors import InitorchError

        if not isinstance(probe, DeviceProbe):
            raise InitorchError(f"{probe!r} is not a device probe",
                                hint="give it device, priority and probe(machine, deep)")
        if probe.device in self._probes:
            raise InitorchError(f"a probe for device type '{probe.device}' is registered twice",
                                hint="register one probe per device type")
        self._probes[probe.device] = probe

    def extend(self, probes: Iterable[DeviceProbe]) -> None:
        for probe in probes:
            self.add(probe)

    def copy(self) -> ProbeCatalog:
        clone = ProbeCatalog()
        clone._probes = dict(self._probes)
        return clone

    def __iter__(self) -> Iterator[DeviceProbe]:
        """In priority order (then by device type, so that ties are stable)."""
        return iter(sorted(self._probes.values(), key=lambda p: (p.priority, p.device)))


def detect(probes: ProbeCatalog, machine: Machine | None = None, *, deep: bool = False,
           timeout_s: float = DEEP_PROBE_TIMEOUT_S,
           announce: Callable[[str], None] | None = None) -> Detection:
    """Ask every probe, in priority order; the first that fits is chosen.

    A deep probe imports packages only up to the chosen candidate (importing two
    vendor plugins into one process can itself fail); the rest are probed
    statically and reported as ``fits`` or ``rejected``.  Each deep probe gets
    ``timeout_s``, and ``announce`` is told its device before it starts, so that a
    slow import is never silent.
    """
    machine = dataclasses.replace(machine or Machine(), import_timeout_s=timeout_s)
    candidates: list[Candidate] = []
    chosen: str | None = None
    for probe in probes:
        probe_deeply = deep and chosen is None
        if probe_deeply and announce is not None:
            announce(probe.device)
        verdict = (_ask_bounded(probe, machine, timeout_s + PROBE_GRACE_S) if probe_deeply
                   else _ask(probe, machine, deep=False))
        if not verdict.fits:
            status: Status = "rejected"
        elif chosen is None:
            status, chosen = "chosen", probe.device
        else:
            status = "fits"
            verdict = Verdict(True, (*verdict.reasons, f"{chosen} comes first"))
        candidates.append(Candidate(probe.device, probe.priority, status, verdict.reasons))
    return Detection(tuple(candidates), deep)


def _ask_bounded(probe: DeviceProbe, machine: Machine, timeout_s: float) -> Verdict:
    """:func:`_ask` deeply, on a daemon thread given ``timeout_s``: a hung import is left
    behind (Python cannot stop it) and reported with the line it hangs at."""
    answers: list[Verdict] = []

    def ask() -> None:
        try:
            answers.append(_ask(probe, machine, deep=True))
        except BaseException as exc:  # a probe's own KeyboardInterrupt, on this thread
            answers.append(Verdict(False, (f"the probe failed: {type(exc).__name__}",)))

    worker = threading.Thread(target=ask, name=f"initorch-probe-{probe.device}", daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout_s
    while worker.is_alive() and time.monotonic() < deadline:
        worker.join(min(0.1, max(deadline - time.monotonic(), 0.0)))  # Ctrl-C stays prompt
    if answers:
        return answers[0]
    frame = sys._current_frames().get(worker.ident or -1)
    where = (f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
             if frame is not None else "an unknown place")
    return Verdict(False, (f"the probe did not finish within {timeout_s:g}s: it hangs at "
                           f"{where} (importing its packages?)",))


def _ask(probe: DeviceProbe, machine: Machine, *, deep: bool) -> Verdict:
    """The probe's verdict; whatever it raises is a rejection that says so."""
    try:
        verdict = probe.probe(machine, deep)
    except (KeyboardInterrupt, RunInterrupted):  # Ctrl-C, or the CLI's SIGTERM: not the probe's
        raise
    except BaseException as exc:  # an import may do anything, sys.exit included
        first = str(exc).strip().splitlines()
        return Verdict(False, (f"the probe failed: {type(exc).__name__}: "
                               f"{first[0] if first else ''}",))
    if not isinstance(verdict, Verdict):
        return Verdict(False, (f"the probe answered {verdict!r}, not a Verdict",))
    return verdict
