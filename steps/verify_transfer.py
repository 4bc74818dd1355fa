"""``verify_transfer``: KV pages really go through the Mooncake Store between ranks.

Each rank fills a few pages of its registered host pool with bytes only it
writes, placed as the configured layout places pages
(:mod:`initorch.steps.kv_layout`), and puts them into the store from the pool
(``batch_put_from``, or ``batch_put_from_multi_buffers`` for an MLA page), as
SGLang's ``MooncakeStore.batch_set_v1`` does.  Then each rank reads the pages of
the previous rank (itself, in a world of one) into other pages of its own pool
(``batch_get_into``) and checks every byte.  Key names are agreed over the
process group, so this also proves that the group, the store and the master
agree on who is who.
"""

from __future__ import annotations

from typing import Any

from initorch.plugin import StepContext, StepError, capture_native_stderr, setting, step
from initorch.steps.host_pool import HostPool, Registration
from initorch.steps.kv_layout import KvGeometry
from initorch.steps.shared_settings import HICACHE_ENABLED, MOONCAKE_ENABLED, STORAGE_BACKEND

GEOMETRY = KvGeometry()

VERIFY_TRANSFER = setting(
    "checks.verify_transfer", bool, default=False,
    description="put KV pages into the Mooncake Store from each rank's pool and read the "
                "previous rank's back, byte-checked")
VERIFY_PAGES = setting("checks.verify_pages", int, default=4, minimum=1, maximum=4096,
                       description="pages each rank puts when checks.verify_transfer is on")


def pattern(sender: int, page: int, part: int, nbytes: int) -> Any:
    """Bytes only ``sender`` writes into ``part`` of ``page``."""
    import torch

    index = torch.arange(nbytes, dtype=torch.int64)
    return ((index * 31 + sender * 97 + page * 13 + part * 7 + 5) % 251).to(torch.uint8)


def view(pool: HostPool, ptr: int, size: int) -> Any:
    """The pool's bytes at ``[ptr, ptr+size)``."""
    offset = ptr - pool.ptr
    return pool.buffer[offset:offset + size]


def agree_on_prefix(ctx: StepContext) -> str:
    import uuid

    prefix = f"initorch-verify-{uuid.uuid4().hex[:12]}"
    if ctx.rank.world_size == 1:
        return prefix
    import torch.distributed as dist

    box: list[Any] = [prefix]
    dist.broadcast_object_list(box, src=0)
    agreed: str = box[0]
    return agreed


def barrier(ctx: StepContext) -> None:
    if ctx.rank.world_size > 1:
        import torch.distributed as dist

        dist.barrier()


def put_pages(store: Any, layout: str, keys: list[str], buffers: list[tuple[tuple[int, int],
              ...]]) -> list[int]:
    """One key per buffer (MHA) or one key over both buffers (MLA), as SGLang puts them."""
    if layout == "page_first_kv_split":
        result: list[int] = store.batch_put_from_multi_buffers(
            keys, [[p for p, _ in page] for page in buffers],
            [[n for _, n in page] for page in buffers])
        return result
    flat = [buffer for page in buffers for buffer in page]
    return list(store.batch_put_from(keys, [p for p, _ in flat], [n for _, n in flat]))


def get_pages(store: Any, layout: str, keys: list[str], buffers: list[tuple[tuple[int, int],
              ...]]) -> list[int]:
    if layout == "page_first_kv_split":
        result: list[int] = store.batch_get_into_multi_buffers(
            keys, [[p for p, _ in page] for page in buffers],
            [[n for _, n in page] for page in buffers])
        return result
    flat = [buffer for page in buffers for buffer in page]
    return list(store.batch_get_into(keys, [p for p, _ in flat], [n for _, n in flat]))


@step(
    "verify_transfer",
    description="Put KV pages from this rank's pool into the Mooncake Store and read the "
                "previous rank's pages into it, checking every byte",
    requires=["register_mem_pool_host", "init_torch_distributed"],
    reads=["register_mem_pool_host"],
    device_bound=True,
    barrier=True,  # no rank reads pages before every rank registered its pool
    when="checks.verify_transfer and hicache.enabled and mooncake.enabled "
         "and hicache.storage_backend == 'mooncake'",
    settings=(VERIFY_TRANSFER, VERIFY_PAGES, HICACHE_ENABLED, MOONCAKE_ENABLED, STORAGE_BACKEND),
)
def verify_transfer(ctx: StepContext) -> dict[str, Any]:
    registration: Registration = ctx.output("register_mem_pool_host")
    pool, store = registration.pool, registration.client.store
    layout, count = pool.layout, int(ctx.setting("checks.verify_pages"))
    rank, world = ctx.rank.rank, ctx.rank.world_size
    if GEOMETRY.pages_in(layout, pool.nbytes) < 2 * count:
        raise StepError(f"a host pool of {pool.nbytes} bytes holds fewer than {2 * count} "
                        f"{layout} pages", hint="raise hicache.host_pool_mb or lower "
                                                "checks.verify_pages")
    prefix = agree_on_prefix(ctx)

    def buffers(page: int) -> tuple[tuple[int, int], ...]:
        return GEOMETRY.page_buffers(layout, pool.ptr, pool.nbytes, page)

    def keys_of(sender: int) -> list[str]:
        return [key for page in range(count) for key in GEOMETRY.keys(layout, prefix, page,
                                                                       sender)]

    for page in range(count):
        for part, (ptr, size) in enumerate(buffers(page)):
            view(pool, ptr, size).copy_(pattern(rank, page, part, size))
    with capture_native_stderr() as native:
        put = put_pages(store, layout, keys_of(rank), [buffers(p) for p in range(count)])
    if any(code != 0 for code in put):
        raise StepError(f"putting {count} {layout} pages into the store failed: {put}",
                        native_log=native.error_lines())
    barrier(ctx)
    sender = (rank - 1) % world
    targets = [buffers(count + page) for page in range(count)]
    with capture_native_stderr() as native:
        got = get_pages(store, layout, keys_of(sender), targets)
    if any(code <= 0 for code in got):
        raise StepError(f"reading rank {sender}'s pages from the store failed: {got}",
                        native_log=native.error_lines())
    for page, page_buffers in enumerate(targets):
        for part, (ptr, size) in enumerate(page_buffers):
            if not bool((view(pool, ptr, size) == pattern(sender, page, part, size)).all()):
                raise StepError(f"rank {rank}: page {page} (buffer {part}) from rank {sender} "
                                "arrived corrupted",
                                hint="check that every rank registered its pool with the same "
                                     "protocol")
    barrier(ctx)  # everyone has read before the keys go
    store.batch_remove(keys_of(rank))
    nbytes = sum(size for page in targets for _, size in page)
    ctx.log.info("transfer_verified", layout=layout, pages=count, nbytes=nbytes,
                 put_by=rank, received_from=sender)
    return {"layout": layout, "pages": count, "bytes": nbytes, "received_from": sender}


STEPS = (verify_transfer,)
