"""The shape of a call map: what the integration needs to know of one SGLang code layout.

A *layout* is a stretch of SGLang releases whose start-up sits in the same functions of
the same files.  Everything the integration names upstream for such a stretch is one
:class:`Layout` value in a module of its own (``layouts/bootstrap.py`` and its siblings),
so that a new release of a known layout needs no code change, and a new layout is one
new file.  The kit's call-map types (:class:`~initorch.kit.Hop`,
:class:`~initorch.kit.EngineCall`, :class:`~initorch.kit.Marker`) carry the calls; a
:class:`Layout` adds SGLang's own facts (the host pool's allocator table, where the
shared engine calls Mooncake).  Paths are inside the ``sglang/`` package; every line
number cites the release named beside it.
"""

from __future__ import annotations

from initorch.kit import DEVICE_MODULE, EngineCall, Hop, Marker, record

__all__ = ["DEVICE_MODULE", "AllocatorTable", "EngineCall", "EngineInit", "Hop", "Layout",
           "Marker"]


@record
class AllocatorTable:
    """The HiCache host pool's allocator table: ``name`` bound at module level in the
    first of ``files`` that assigns it, a ``defaultdict`` keyed by device type whose
    default is the CUDA ``cudaHostRegister`` path (the MUSA seed bug: a device missing
    from it falls through to CUDA)."""

    files: tuple[str, ...]
    name: str = "ALLOC_MEMORY_FUNCS"
    register_call: str = "cudaHostRegister"

    def dotted(self) -> tuple[str, ...]:
        """The table's dotted names, one per candidate file, for code that patches it
        (``sglang.srt.mem_cache.pool_host.common.ALLOC_MEMORY_FUNCS``)."""
        return tuple("sglang." + file.removesuffix(".py").replace("/", ".") + "." + self.name
                     for file in self.files)


@record
class EngineInit:
    """Where the shared Mooncake engine calls the vendor's ``TransferEngine.initialize``:
    ``function`` of ``file`` calls ``vendor_call`` (an attribute), directly or inside a
    lambda/nested function handed to a helper (``run_with_deadline``)."""

    file: str
    function: str
    vendor_call: str = "initialize"


@record
class Layout:
    """Every upstream name the integration touches in one code layout.

    ``markers`` must all be defined in a tree of this layout and ``absent`` none of
    them; ``releases`` says which published wheels were read (the audit re-reads any
    other).  ``set_device``/``engine``/``process_group`` are the chains that decide the
    Ascend order hazard; ``scheduler_init`` frames a rank's start-up for verify mode;
    ``parallel_runtime`` is what drive mode replaces (``None``: drive mode cannot run)."""

    name: str
    releases: str
    markers: tuple[Marker, ...]
    absent: tuple[Marker, ...]
    calls: tuple[EngineCall, ...]
    set_device: tuple[Hop, ...]
    engine: tuple[Hop, ...]
    process_group: tuple[Hop, ...]
    engine_init: EngineInit
    allocator: AllocatorTable
    scheduler_init: str = "sglang.srt.managers.scheduler.Scheduler.__init__"
    parallel_runtime: str | None = None
    deadline_helper: str | None = None
    plugin_registry: str = "srt/plugins/hook_registry.py"
    notes: tuple[str, ...] = ()

    def call_for(self, step: str) -> EngineCall | None:
        """The SGLang call that performs ``step`` in this layout, if any."""
        return next((call for call in self.calls if call.step == step), None)

    def hook_targets(self) -> tuple[str, ...]:
        """Every dotted SGLang name the plugin hooks in this layout (the device module's
        ``set_device`` is torch's, not SGLang's, and left out)."""
        targets = [call.target for call in self.calls if not call.target.startswith(
            DEVICE_MODULE)]
        targets.append(self.scheduler_init)
        if self.parallel_runtime is not None:
            targets.append(self.parallel_runtime)
        return tuple(dict.fromkeys(targets))
