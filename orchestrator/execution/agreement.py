"""What one rank tells the others about its plan, and how the ranks' plans differ.

Every rank publishes a :func:`manifest` of its plan through the job's store: the
fingerprint, and the parts it is made of (world size, device type, profiles,
steps, settings -- compared only where some rank's planned steps read them --
and the profiles' ``env:``), so that a disagreement can be
explained, not just detected.  :func:`differences` turns the manifests into one
line per thing that differs, naming the ranks on each side::

    hicache.host_pool_mb: 64 on ranks 0,2,3; 128 on rank 1

The manifests themselves are read only to explain a difference: every rank also
publishes :func:`compared_digest`, a digest of exactly what :func:`differences`
compares, and one rank (the watcher) compares the N digests and publishes a
:func:`verdict` that the others read.  Equal digests mean no difference; different
ones make the watcher read the manifests, once, and say what differs.

The device index is left out on purpose: ``--device npu:3`` on one host and
``npu:5`` on another is one job, while a different device *type* is not.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from initorch._version import __version__
from initorch.errors import PeerError
from initorch.execution.launchers import RankInfo
from initorch.model.canonical import declaration, step_fields
from initorch.resolution.plan import Plan, env_values, read_settings

Manifest = dict[str, Any]
MAX_SHOWN = 20  # differences listed before "... and N more"
FINGERPRINT_SHOWN = 12  # a fingerprint's characters in a disagreement
SAME_PLANS_HINT = ("start every rank from the same profiles, --set values and initorch "
                   "version, or from one saved plan: initorch run --plan FILE")


def manifest(plan: Plan, rank: RankInfo) -> Manifest:
    """This rank's plan as the other ranks compare it (JSON-safe)."""
    return {
        "rank": rank.rank,
        "world_size": rank.world_size,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": __version__,
        "fingerprint": plan.fingerprint,
        "device_type": plan.device.type,
        "profiles": list(plan.profiles),
        "steps": {p.name: _digest({"wave": p.wave, **step_fields(p.step),
                                   "declared": declaration(p.declared)}) for p in plan.steps},
        "skipped": sorted(s.name for s in plan.skipped),
        "settings": {key: s.value for key, s in sorted(plan.settings.items())},
        # What decides how its plan runs: the settings compared (their values on every
        # rank, so that a step planned on one rank only shows why it is skipped on the
        # others); a setting no rank's plan reads (an unrelated plugin's) is not.
        "reads": sorted(read_settings(plan.settings, plan.steps)),
        "env": env_values(plan.env),
    }


def compared_digest(m: Manifest) -> str:
    """A digest of what :func:`differences` compares in ``m`` (not its host, pid or
    fingerprint): two ranks with the same digest have no difference to name."""
    return _digest([[label, values] for label, values in _aspects({0: m})])


def plan_key(m: Manifest) -> str:
    """What a rank publishes on its progress, and the watcher groups the ranks by: its
    :func:`compared_digest` and its fingerprint as :func:`disagreement` shows it.  Ranks
    with one key have one explanation, so one manifest per key explains them all."""
    return f"{compared_digest(m)}/{m['fingerprint'][:FINGERPRINT_SHOWN]}"


def verdict(error: PeerError | None, agreed: Manifest, hosts: list[str]) -> dict[str, Any]:
    """What the watcher publishes once it has judged the plans: the agreed plan's
    digest, fingerprint, world size and hosts (up to ``MAX_SHOWN`` of them, and how
    many), or the disagreement every rank raises."""
    if error is not None:
        return {"message": str(error), "ranks": _runs(error.ranks),
                "details": list(error.details), "hint": error.hint}
    return {"digest": compared_digest(agreed), "fingerprint": agreed["fingerprint"],
            "world_size": agreed["world_size"], "hosts": hosts[:MAX_SHOWN],
            "host_count": len(hosts)}


def verdict_error(published: Mapping[str, Any]) -> PeerError | None:
    """The disagreement a published :func:`verdict` holds, if it holds one."""
    if "message" not in published:
        return None
    return PeerError(published["message"], ranks=_ranks(published["ranks"]),
                     details=published["details"], hint=published["hint"])


def _runs(ranks: Iterable[int]) -> list[list[int]]:
    """``[[0, 5], [7, 7]]`` for ranks 0-5 and 7: a job's worth of ranks in a few pairs."""
    if isinstance(ranks, range) and ranks.step == 1:
        return [[ranks.start, ranks.stop - 1]] if ranks else []
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and runs[-1][1] == rank - 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return runs


def _ranks(runs: Sequence[list[int]]) -> Sequence[int]:
    """The ranks of ``runs``; one run (a job's every rank) stays a ``range``: each rank
    reads the verdict, and none need build the list of every rank."""
    if len(runs) == 1:
        first, last = runs[0]
        return range(first, last + 1)
    return [rank for first, last in runs for rank in range(first, last + 1)]


def _digest(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def disagreement(manifests: Mapping[int, Manifest],
                 sharing: Mapping[int, Sequence[int]] | None = None) -> PeerError | None:
    """The error every rank raises when the plans differ (None when they agree).

    ``sharing`` gives, for a rank of ``manifests``, every rank whose manifest has the
    same :func:`plan_key` (itself included): the watcher reads one manifest per key, not
    N, and each line still names every rank on each side."""
    found = differences(manifests, sharing)
    if not found:
        return None
    fingerprints = _difference("fingerprints", {
        rank: m["fingerprint"][:FINGERPRINT_SHOWN] for rank, m in sorted(manifests.items())},
        sharing)
    ranks = [r for rank in manifests for r in _members(rank, sharing)]
    return PeerError(f"the ranks' plans differ ({fingerprints or 'same fingerprint'})",
                     ranks=sorted(ranks), details=found, hint=SAME_PLANS_HINT)


def differences(manifests: Mapping[int, Manifest],
                sharing: Mapping[int, Sequence[int]] | None = None) -> list[str]:
    """One line per aspect in which the ranks' manifests differ (empty: they agree);
    ``sharing`` as for :func:`disagreement`."""
    ordered = dict(sorted(manifests.items()))
    lines = [line for label, values in _aspects(ordered)
             if (line := _difference(label, values, sharing)) is not None]
    if len(lines) > MAX_SHOWN:
        lines = [*lines[:MAX_SHOWN], f"... and {len(lines) - MAX_SHOWN} more"]
    return lines


def _aspects(manifests: Mapping[int, Manifest]) -> Iterator[tuple[str, dict[int, Any]]]:
    """(label, value on each rank), in the order a reader wants them."""

    def each(read: Callable[[Manifest], Any]) -> dict[int, Any]:
        return {rank: read(m) for rank, m in manifests.items()}

    yield "world size", each(lambda m: m["world_size"])
    yield "device type", each(lambda m: m["device_type"])
    yield "initorch version", each(lambda m: m["version"])
    yield "profiles", each(lambda m: " -> ".join(m["profiles"]))
    for name in _union(m["steps"] for m in manifests.values()):
        yield f"step {name}", each(partial(_step_state, name=name))
    for key in _union(dict.fromkeys(m["reads"]) for m in manifests.values()):
        if key != "device.type":  # reported as the device type
            yield key, each(partial(_entry, section="settings", key=key))
    for name in _union(m["env"] for m in manifests.values()):
        yield f"env {name}", each(partial(_entry, section="env", key=name))


_ABSENT = object()


def _union(mappings: Iterable[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for mapping in mappings:
        seen.update(dict.fromkeys(mapping))
    return sorted(seen)


def _entry(m: Manifest, section: str, key: str) -> str:
    value = m[section].get(key, _ABSENT)
    if value is _ABSENT and section == "settings":
        return "(not declared: a plugin missing there?)"  # only plugins declare settings
    return _shown(value)


def _step_state(m: Manifest, name: str) -> str:
    if name in m["steps"]:
        return f"planned (declaration {m['steps'][name]})"
    return "skipped" if name in m["skipped"] else "not in the plan"


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return "(not set)"
    return value if isinstance(value, str) and value else json.dumps(value)


def _members(rank: int, sharing: Mapping[int, Sequence[int]] | None) -> Sequence[int]:
    """The ranks whose manifest ``rank``'s stands for (itself alone without ``sharing``)."""
    return (rank,) if sharing is None else sharing.get(rank, (rank,))


def _difference(label: str, values: Mapping[int, Any],
                sharing: Mapping[int, Sequence[int]] | None = None) -> str | None:
    groups: dict[str, list[int]] = {}
    for rank, value in values.items():
        groups.setdefault(str(value), []).extend(_members(rank, sharing))
    if len(groups) < 2:
        return None
    return f"{label}: " + "; ".join(f"{value} on {rank_list(ranks)}"
                                    for value, ranks in groups.items())


def rank_list(ranks: Iterable[int]) -> str:
    """``rank 1``, ``ranks 0,2,3``, ``ranks 0-5,7`` (a ``range`` read in one step)."""
    runs = _runs(ranks)
    shown = [str(first) if first == last else f"{first},{last}" if last == first + 1
             else f"{first}-{last}" for first, last in runs]
    one = len(runs) == 1 and runs[0][0] == runs[0][1]
    return f"rank {shown[0]}" if one else f"ranks {','.join(shown)}"
