"""``initorch trace merge``: the ranks' ``--trace`` files as one Perfetto file.

Each rank writes its own Chrome trace (``--trace trace-{rank}.json``): process id
= rank, times in microseconds since that rank's run started.  Merged, every rank
is one process (sorted by rank) on one time line: each rank's spans are shifted
by how much later than the earliest rank it started (``otherData.started_at``, a
wall-clock time, so ranks on several hosts are as aligned as their clocks), and
a rank that is slow to reach a step stands out at a glance.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

from initorch.errors import InitorchError
from initorch.files import describe_os_error, read_input
from initorch.location import display_path


def read_json_file(path: str, what: str, hint: str) -> Any:
    """The JSON document in ``path``; :class:`InitorchError` (exit 2) naming it when it
    cannot be read or is not JSON (``what`` names what it should be, ``hint`` how to
    get one).

    It is read like every input (:func:`~initorch.files.read_input`): only a regular
    file, at most 16 MiB, so a FIFO or ``/dev/zero`` passed by mistake is refused at
    once instead of read for ever."""
    shown = display_path(path)
    try:
        return json.loads(read_input(path).decode("utf-8"), parse_constant=_refuse_constant)
    except OSError as exc:
        raise InitorchError(f"{shown}: cannot read it: {describe_os_error(exc)}",
                            hint="check the path") from None
    except RecursionError:
        raise InitorchError(f"{shown}: not {what} (its JSON nests deeper than Python can "
                            "read)", hint=hint) from None
    except ValueError as exc:  # not UTF-8 (UnicodeDecodeError), not JSON, NaN or Infinity
        raise InitorchError(f"{shown}: not JSON ({exc})", hint=hint) from None


def read_trace(path: str) -> dict[str, Any]:
    """One rank's trace file (:func:`read_json_file`); :class:`InitorchError` (exit 2)
    naming it when it is not one."""
    hint = "pass the files 'initorch run --trace' wrote"
    data = read_json_file(path, "a Chrome trace", hint)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InitorchError(f"{display_path(path)}: not a Chrome trace (no traceEvents list)",
                            hint=hint)
    return data


def _refuse_constant(name: str) -> float:
    """``NaN``, ``Infinity``, ``-Infinity``: Python reads them, JSON has none, and a
    merged trace holding one would not be JSON for the tools that open it."""
    raise ValueError(f"{name} is not a JSON number")


def _rank_of(data: dict[str, Any], shown: str) -> int:
    rank = (data.get("otherData") or {}).get("rank")
    if rank is None:
        pids = {event.get("pid") for event in data["traceEvents"] if isinstance(event, dict)}
        rank = pids.pop() if len(pids) == 1 else None
    if not isinstance(rank, int) or isinstance(rank, bool):
        raise InitorchError(f"{shown}: cannot tell which rank wrote it",
                            hint="pass the files 'initorch run --trace' wrote")
    return rank


def _start_us(data: dict[str, Any]) -> float | None:
    text = (data.get("otherData") or {}).get("started_at")
    try:
        return datetime.datetime.fromisoformat(text).timestamp() * 1e6 if text else None
    except (TypeError, ValueError):
        return None


def merge_traces(paths: Sequence[str]) -> dict[str, Any]:
    """One trace with a process per rank, on the earliest rank's time line."""
    if not paths:
        raise InitorchError("no trace files to merge", hint="pass the ranks' --trace files")
    ranks: dict[int, tuple[str, dict[str, Any]]] = {}
    for path in paths:
        data, shown = read_trace(path), display_path(path)
        rank = _rank_of(data, shown)
        if rank in ranks:
            raise InitorchError(f"{shown} and {ranks[rank][0]} are both rank {rank}",
                                hint="merge the files of one run, one per rank")
        ranks[rank] = (shown, data)
    starts = {rank: _start_us(data) for rank, (_, data) in ranks.items()}
    known = [start for start in starts.values() if start is not None]
    earliest = min(known) if known else 0.0
    events: list[dict[str, Any]] = []
    for rank, (_, data) in sorted(ranks.items()):
        start = starts[rank]
        shift = start - earliest if start is not None else 0.0
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for event in data["traceEvents"]:
            if not isinstance(event, dict):
                continue
            moved = {**event, "pid": rank}
            if "ts" in moved and isinstance(moved["ts"], (int, float)):
                moved["ts"] = round(moved["ts"] + shift, 3)
            events.append(moved)
    fingerprints = {rank: (data.get("otherData") or {}).get("fingerprint")
                    for rank, (_, data) in sorted(ranks.items())}
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"ranks": sorted(ranks), "fingerprints": fingerprints,
                          "aligned_on": "started_at" if known else "none"}}
