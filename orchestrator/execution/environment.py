"""A plan's ``env:`` section applied to the process, and undone afterwards.

Precedence: **the process environment wins.**  A profile describes a kind of
machine and is shared by every machine of that kind; the environment a
launcher, a container or an operator exported describes this machine and this
job (``HCCL_SOCKET_IFNAME`` of this host, ``ASCEND_NPU_PHY_ID`` of this rank).
So a profile's value is a default, like a container image's ``ENV`` that
``docker run -e`` overrides: a variable already set, even to an empty string,
is kept, and the difference is reported (``env_kept`` warning, ``environment``
in the run report).

What a run set, it unsets again after the last teardown, so an embedding
launcher's process is left as it was.  Native libraries may have read a value
while it was set (Mooncake reads ``MC_FORCE_TCP`` when an engine initialises);
that is the point of setting it before the first step.

Variables are set before the first step because several are read once, at
import or initialisation (``PYTORCH_NPU_ALLOC_CONF`` by torch_npu,
``HSA_USERPTR_FOR_PAGED_MEM`` by the HIP runtime): an embedding launcher that
imported torch before creating the run is too late for those.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import field
from typing import Any, Literal

from initorch.loading.document import EnvEntry
from initorch.records import record

Source = Literal["profile", "process"]


@record
class EnvOutcome:
    """What a variable ended up as, and whether the profile or the process decided."""

    name: str
    value: str
    source: Source
    profile_value: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "source": self.source,
                "profile_value": self.profile_value}


@record(frozen=False)
class AppliedEnvironment:
    """The variables one run set; :meth:`restore` unsets exactly those."""

    outcomes: list[EnvOutcome] = field(default_factory=list)
    _environ: MutableMapping[str, str] = field(default_factory=lambda: os.environ)
    _restored: bool = False

    @property
    def set_by_run(self) -> list[str]:
        return [o.name for o in self.outcomes if o.source == "profile"]

    def restore(self) -> list[str]:
        """Unset what this run set (unless someone changed it since); returns the names."""
        if self._restored:
            return []
        self._restored = True
        undone = []
        for outcome in self.outcomes:
            if outcome.source == "profile" and self._environ.get(outcome.name) == outcome.value:
                del self._environ[outcome.name]
                undone.append(outcome.name)
        return undone


def apply_environment(env: Mapping[str, EnvEntry],
                      environ: MutableMapping[str, str] | None = None) -> AppliedEnvironment:
    """Set every variable of ``env`` that ``environ`` (default ``os.environ``) lacks."""
    target = os.environ if environ is None else environ
    applied = AppliedEnvironment(_environ=target)
    for name, entry in env.items():
        if entry.value is None:
            continue
        present = target.get(name)
        if present is None:
            target[name] = entry.value
            applied.outcomes.append(EnvOutcome(name, entry.value, "profile", entry.value))
        else:
            applied.outcomes.append(EnvOutcome(name, present, "process", entry.value))
    return applied
