"""HiCache host-pool layouts, as SGLang names and places KV pages.

Names (SGLang 0.5.23 ``srt/arg_groups/fields/memory.py`` ``hicache_mem_layout``
choices): ``layer_first``, ``page_first``, ``page_first_direct``,
``page_first_kv_split``, ``page_head``.  ``page_first_kv_spilt``, a misspelling
an older initorch accepted and that circulates in configs, is a deprecated alias.

Rewrites follow ``srt/arg_groups/hicache_hook.py``, in its order (:81-86):
``resolve_layout_io_compatibility`` (:173-194) switches ``page_first_direct`` with
the ``kernel`` io backend to the ``direct`` io backend, then ``page_first`` with
``direct`` to ``page_first_direct``; ``resolve_storage_layout_compatibility``
(:197-225) turns ``layer_first`` with the Mooncake store into
``page_first_direct`` (``direct``) or ``page_first`` (``kernel``), and keeps it
for other io backends (``kernel_ascend``).  There the store then fails on the
first page of an MHA pool (``mooncake_store.py:1320 _get_mha_buffer_meta``), so
initorch refuses MHA at once and keeps ``layer_first`` for MLA models
(``hicache.mla``), where the store takes it.  ``tests/sglang/test_oracle_layout.py``
runs SGLang's own hook functions on every combination.

Page placement follows ``get_page_buffer_meta`` (``srt/mem_cache/pool_host/mha.py``
and ``mla.py``): for the MHA page layouts a page's K and V are each one
contiguous range (two store keys, ``<key>_<rank>_k`` / ``_v``); for
``page_first_kv_split`` (MLA) a page is one key over two buffers, the latent K
and the rope part.  :class:`KvGeometry` is the small model the verification
step uses to lay out pages in the pool.
"""

from __future__ import annotations

from initorch.plugin import StepError, record

LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head")
DEPRECATED_LAYOUTS = {"page_first_kv_spilt": "page_first_kv_split"}
IO_BACKENDS = ("direct", "kernel", "kernel_ascend")
MHA_PAGE_LAYOUTS = ("page_first", "page_first_direct", "page_head")


@record
class LayoutChoice:
    """The layout to use, and what was changed on the way (for warnings)."""

    layout: str
    io_backend: str
    notes: tuple[str, ...] = ()


def resolve_layout(requested: str, storage_backend: str, io_backend: str,
                   mla: bool = False) -> LayoutChoice:
    """The layout and io backend SGLang would run with for these settings, or a
    StepError where SGLang would start and then fail."""
    notes: list[str] = []
    layout = requested
    if layout in DEPRECATED_LAYOUTS:
        layout = DEPRECATED_LAYOUTS[layout]
        notes.append(f"hicache.layout '{requested}' is a deprecated misspelling; write "
                     f"'{layout}'")
    if layout not in LAYOUTS:
        raise StepError(f"host pool layout '{requested}' is not one of SGLang's layouts",
                        hint=f"set hicache.layout to one of {', '.join(LAYOUTS)}")
    if io_backend not in IO_BACKENDS:
        raise StepError(f"hicache.io_backend '{io_backend}' is not one of SGLang's",
                        hint=f"set hicache.io_backend to one of {', '.join(IO_BACKENDS)}")
    if layout == "page_first_direct" and io_backend == "kernel":
        io_backend = "direct"
        notes.append("the kernel io backend does not support page_first_direct, switching to "
                     "the direct io backend (as SGLang does)")
    if layout == "page_first" and io_backend == "direct":
        layout = "page_first_direct"
        notes.append("page_first is not supported with the direct io backend, switching to "
                     "page_first_direct (as SGLang does)")
    if layout == "layer_first" and storage_backend == "mooncake":
        if io_backend == "kernel_ascend" and mla:
            return LayoutChoice(layout, io_backend, tuple(notes))
        if io_backend == "kernel_ascend":
            raise StepError(
                "host pool layout 'layer_first' is not supported by the Mooncake store with "
                "io backend kernel_ascend for an MHA model: SGLang keeps it, and the store "
                "then fails with 'Mooncake layer_first multi-buffer is only supported for MLA "
                "host KV pool'",
                hint="set hicache.layout: page_first_direct (page_first_kv_split for MLA "
                     "models)")
        layout = "page_first_direct" if io_backend == "direct" else "page_first"
        notes.append(f"the Mooncake store does not support layer_first, switching to {layout} "
                     f"for the {io_backend} io backend (as SGLang does)")
    return LayoutChoice(layout, io_backend, tuple(notes))


@record
class KvGeometry:
    """A small KV cache: enough layers, heads and tokens per page to place pages the way
    SGLang does, in whatever host memory the pool has."""

    layers: int = 4
    heads: int = 2
    head_dim: int = 64
    kv_lora_rank: int = 128  # MLA latent width (page_first_kv_split)
    rope_dim: int = 32       # MLA rope width
    itemsize: int = 2        # bf16
    page_size: int = 16      # tokens per page

    def buffer_sizes(self, layout: str) -> tuple[int, ...]:
        """Bytes of each buffer of one page: (K, V) for MHA, (latent, rope) for MLA."""
        per_token_layer = self.page_size * self.layers * self.itemsize
        if layout == "page_first_kv_split":
            return (per_token_layer * self.kv_lora_rank, per_token_layer * self.rope_dim)
        if layout in MHA_PAGE_LAYOUTS:
            mha = per_token_layer * self.heads * self.head_dim
            return (mha, mha)
        raise StepError(f"pages of layout '{layout}' cannot be placed",
                        hint="resolve the layout first (resolve_layout)")

    def pages_in(self, layout: str, nbytes: int) -> int:
        return nbytes // sum(self.buffer_sizes(layout))

    def page_buffers(self, layout: str, base: int, nbytes: int, page: int
                     ) -> tuple[tuple[int, int], ...]:
        """``(pointer, size)`` of each buffer of ``page`` in a pool at ``base``.

        Both buffers of a layout are regions of their own: all pages' first
        buffers, then all pages' second (SGLang's ``v_offset``, or its separate
        ``k_buffer`` / ``v_buffer``)."""
        sizes = self.buffer_sizes(layout)
        pages = self.pages_in(layout, nbytes)
        if not 0 <= page < pages:
            raise StepError(f"page {page} is outside a pool of {pages} pages",
                            hint="give hicache.host_pool_mb more memory")
        first, second = sizes
        return ((base + page * first, first),
                (base + pages * first + page * second, second))

    def keys(self, layout: str, prefix: str, page: int, rank: int) -> tuple[str, ...]:
        """Store keys of one page: MHA ``<key>_<rank>_k`` and ``_v`` as SGLang names them;
        one key for an MLA page.  SGLang's MLA key (``<key>__k``) is shared by all ranks,
        which hold the same latent cache; here each rank writes its own bytes, so the
        rank goes into the key."""
        key = f"{prefix}-p{page}"
        if layout == "page_first_kv_split":
            return (f"{key}_r{rank}_k",)
        return (f"{key}_{rank}_k", f"{key}_{rank}_v")
