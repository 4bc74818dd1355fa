"""Settings that several built-in steps read, declared once.

A setting only one module reads is declared there; these are read (or tested in
``when:`` conditions) by steps in several modules: the Mooncake switch and what
the engine and the store share, and the HiCache switches.
"""

from __future__ import annotations

from initorch.plugin import setting
from initorch.steps.mooncake_env import read_protocol

MOONCAKE_ENABLED = setting(
    "mooncake.enabled", bool, default=True,
    description="the switch: false skips every Mooncake step (and plugin steps that follow it)")
# Mooncake picks the transport from its build, topology and environment, not from this
# (transfer_engine_impl.cpp init, Mooncake 0.3.13); the engine step compares the two.
MOONCAKE_PROTOCOL = setting(
    "device.mooncake_protocol", str, required=True, pattern=r"[a-z][a-z0-9_]*",
    from_environment=read_protocol,
    description="the Mooncake transport the profile means (tcp, rdma, ascend, ...); passed to "
                "initialize and the store, and checked against what Mooncake installs "
                "(SGLang: MOONCAKE_PROTOCOL)")
MOONCAKE_DEVICE_NAME = setting(
    "mooncake.device_name", str, default="",
    description="RDMA device(s) for the rdma transport; ignored when MC_FORCE_TCP=1, as in "
                "SGLang")
HICACHE_ENABLED = setting(
    "hicache.enabled", bool, default=True,
    description="allocate the HiCache host KV pool (and register it with the storage backend)")
STORAGE_BACKEND = setting(
    "hicache.storage_backend", str, default="mooncake", choices=("mooncake", "none"),
    description="SGLang's --hicache-storage-backend: mooncake (master, store, registration) "
                "or none")
