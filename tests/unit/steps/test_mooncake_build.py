"""Build detection against the published Mooncake wheels (tests/support/wheels.py), not stubs.

The five wheels are downloaded once; each test reads their real binaries.  The
simulated Ascend stubs (tests/support/simulated) are checked here against the npu wheel,
so that the simulation cannot drift into what initorch believes.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from initorch.steps.elf import needed
from initorch.steps.mooncake_build import (
    MooncakeBuild,
    installed_build,
    metadata_scheme,
    scan_binary,
)
from tests.support.wheels import (
    CACHE,
    MOONCAKE_CPU,
    MOONCAKE_CUDA12,
    MOONCAKE_CUDA13,
    MOONCAKE_NPU,
    MOONCAKE_ROCM,
    MOONCAKE_WHEELS,
    Wheel,
    cache_lock,
    wheel,
)

SIMULATION = Path(__file__).parents[2] / "support" / "simulated" / "site" / "initorch_simulation"

# What each published wheel was built with, as its binaries show.
BUILDS = {
    MOONCAKE_NPU: ("ascend_direct", {"ascend", "rdma", "tcp"}),
    MOONCAKE_CPU: (None, {"rdma", "tcp"}),
    MOONCAKE_CUDA12: (None, {"nvlink", "rdma", "tcp"}),
    MOONCAKE_CUDA13: (None, {"efa", "nvlink", "rdma", "tcp"}),
    MOONCAKE_ROCM: (None, {"hip", "rdma", "tcp"}),
}


def elf_stub() -> ModuleType:
    """The simulation's stub writer, loaded from its file (it imports nothing of ours)."""
    spec = importlib.util.spec_from_file_location("_elf_stub", SIMULATION / "elf_stub.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dist", MOONCAKE_WHEELS, ids=lambda d: d[0])
def test_each_published_build_is_read_from_its_binaries(dist: tuple[str, str]) -> None:
    folder = wheel(*dist).unpack("mooncake")
    build = installed_build(str(folder / "engine.so"))
    ascend, protocols = BUILDS[dist]
    assert (build.ascend, set(build.protocols)) == (ascend, protocols), build.describe()


def test_the_npu_binding_holds_no_transport_its_libraries_do() -> None:
    npu = wheel(*MOONCAKE_NPU)
    folder = npu.unpack("mooncake")
    assert scan_binary(str(folder / "engine.so")) == frozenset()
    assert scan_binary(str(folder / "libtransfer_engine.so")) >= {"AscendDirectTransport"}
    assert scan_binary(str(folder / "ascend_transport.so")) == {"AscendDirectTransport"}
    assert "libtransfer_engine.so" in npu.needed("mooncake/engine.so")
    assert "ascend_transport.so" in npu.needed("mooncake/libtransfer_engine.so")


@pytest.mark.parametrize("dist", [MOONCAKE_NPU, MOONCAKE_CUDA12], ids=lambda d: d[0])
def test_needed_entries_agree_with_readelf(dist: tuple[str, str]) -> None:
    real = wheel(*dist)
    members = [m for m in real.members if m.startswith("mooncake/") and m.endswith(".so")]
    assert members
    for member in members:
        assert needed(real.file(member)) == real.needed(member), member


def test_needed_of_a_file_that_is_not_elf_is_empty(tmp_path: Path) -> None:
    stub = tmp_path / "engine.so"
    stub.write_bytes(b"TcpTransport")
    assert needed(stub) == ()


def test_the_simulated_npu_stubs_match_the_real_npu_wheel() -> None:
    real = wheel(*MOONCAKE_NPU)
    stubs = elf_stub()
    folder = stubs.engine_stub("ascend_direct").parent
    layout = stubs.LAYOUTS["ascend_direct"]
    for name in layout:
        member = f"mooncake/{name}"
        assert member in real.members, f"the npu wheel has no {member}"
        in_folder = tuple(n for n in real.needed(member) if n in layout)
        assert needed(folder / name) == in_folder, name
        assert scan_binary(str(folder / name)) == scan_binary(str(real.file(member))), name
    assert installed_build(str(folder / "engine.so")).classes == installed_build(
        str(real.unpack("mooncake") / "engine.so")).classes


@pytest.mark.parametrize("dist", MOONCAKE_WHEELS, ids=lambda d: d[0])
def test_no_published_build_has_a_redis_metadata_plugin(dist: tuple[str, str]) -> None:
    folder = wheel(*dist).unpack("mooncake")
    build = installed_build(str(folder / "engine.so"))
    assert build.metadata_schemes == {"etcd", "http", "https"}, build.describe()


@pytest.mark.parametrize(("server", "scheme"), [
    ("P2PHANDSHAKE", None), ("10.0.0.1:2379", "etcd"), ("etcd://10.0.0.1:2379", "etcd"),
    ("redis://10.0.0.1:6379", "redis"), ("https://meta/metadata", "https")])
def test_the_metadata_scheme_is_read_as_mooncake_parses_it(server: str, scheme: str | None
                                                           ) -> None:
    assert metadata_scheme(server) == scheme


@pytest.mark.parametrize("key", ["mooncake.metadata_server", "mooncake.store.metadata_server"])
def test_a_scheme_the_installed_build_lacks_is_refused_at_plan_time(run_cli, key: str) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("mooncake")  # the installed CPU wheel, no redis (test above)
    code, out, err = run_cli("plan", "-p", "cpu", "--set", f"{key}=redis://10.0.0.1:6379")
    assert (code, out) == (2, ""), err
    assert f"{key} 'redis://10.0.0.1:6379' needs Mooncake's redis metadata plugin" in err
    code, out, _ = run_cli("plan", "-p", "cpu", "--set", f"{key}=http://10.0.0.1:8080/m")
    assert code == 0 and f"{key}: http plugin present" in out


def test_no_published_wheel_gives_a_mooncake_cpu_group_on_a_cpu_host() -> None:
    # docs/hardware.md, cpu + mooncake-ep: the non-CUDA wheel has no mooncake.pg at
    # all, and the CUDA wheel's needs the CUDA torch and the NVIDIA driver.
    assert not [m for m in wheel(*MOONCAKE_CPU).members if "/pg_" in m]
    cuda = wheel(*MOONCAKE_CUDA12)
    pg = next(m for m in cuda.members if m.startswith("mooncake/pg_2_13_0"))
    assert {"libtorch_cuda.so", "libcudart.so.12"} <= set(cuda.needed(pg))
    assert "libcuda.so.1" in cuda.needed("mooncake/libmooncake_pg.so")


def test_the_rocm_build_needs_the_hip_runtime() -> None:
    rocm = wheel(*MOONCAKE_ROCM)
    assert {"libamdhip64.so.7", "libhsa-runtime64.so.1"} <= set(rocm.needed("mooncake/engine.so"))


def test_torch_npu_2_14_pins_torch_2_14() -> None:
    # Install (docs/tutorial.md): the npu extra cannot float torch (torch-npu 2.14.0 METADATA).
    npu = wheel("torch-npu", "2.14.0")
    metadata = npu.read(next(m for m in npu.members if m.endswith(".dist-info/METADATA")))
    assert "Requires-Dist: torch==2.14.0.*" in metadata.decode().splitlines()


def test_the_imported_engines_support_flags_agree_with_its_binaries() -> None:
    pytest.importorskip("mooncake.engine")  # the installed non-CUDA wheel
    build = installed_build()
    flags = dict(build.flags)
    assert {"SUPPORT_CUDA", "SUPPORT_HIP", "SUPPORT_MUSA", "SUPPORT_EFA"} <= set(flags)
    assert not any(flags.values())  # a CPU build: nothing but rdma and tcp compiled in
    assert build.protocols == installed_build(build.binary).protocols == {"rdma", "tcp"}


def test_a_flag_decides_over_the_scan() -> None:
    scanned = MooncakeBuild("engine.so", frozenset({"TcpTransport", "HipTransport"}))
    assert MooncakeBuild(scanned.binary, scanned.classes, (),
                         (("SUPPORT_HIP", False), ("SUPPORT_MUSA", True))).protocols == {
        "tcp", "musa"}


def test_the_0_3_14_store_chooses_its_implementation_as_the_step_expects() -> None:
    from initorch.steps.store import CHECKED_STORE_BACKEND, STORE_BACKEND_VARIABLE

    chooser = wheel(*MOONCAKE_CUDA13).read("mooncake/store/__init__.py").decode()
    assert (f'_BACKEND = os.environ.get("{STORE_BACKEND_VARIABLE}", '
            f'"{CHECKED_STORE_BACKEND}")') in chooser
    assert not [m for m in wheel(*MOONCAKE_CPU).members if m.startswith("mooncake/store/")]


def test_a_store_implementation_not_checked_is_refused_at_plan_time(run_cli, monkeypatch  # type: ignore[no-untyped-def]
                                                                    ) -> None:
    monkeypatch.setenv("MOONCAKE_STORE_BACKEND", "rs")
    code, _, err = run_cli("plan", "-p", "cpu")
    assert code == 2 and "MOONCAKE_STORE_BACKEND='rs' selects a Mooncake Store" in err


@pytest.mark.parametrize("dist", MOONCAKE_WHEELS, ids=str)
def test_every_published_wheel_ships_the_master_binary_the_step_starts(dist: tuple[str, str]
                                                                       ) -> None:
    """``master_binary`` takes ``mooncake/mooncake_master`` from the package folder; 0.3.14
    adds a ``mooncake_master`` console script, which only execs that same binary."""
    published = wheel(*dist)
    assert "mooncake/mooncake_master" in published.members
    if dist == MOONCAKE_CUDA13:
        scripts = published.read(
            "mooncake_transfer_engine_cuda13-0.3.14.dist-info/entry_points.txt").decode()
        assert "mooncake_master = mooncake.cli:main" in scripts
        cli = published.read("mooncake/cli.py").decode()
        assert 'bin_path = locate("mooncake_master")' in cli and "os.execv(bin_path" in cli


# -- the MUSA wheel: published for CPython 3.10 only, read all the same ----------------------

MOONCAKE_MUSA = ("mooncake-transfer-engine-musa", "0.3.13.post1")
MUSA_TARGET = ("3.10", "cp310", "manylinux_2_35_x86_64")  # the only wheel PyPI has


def foreign_wheel(dist: str, version: str, target: tuple[str, str, str]) -> Wheel:
    """``dist==version`` built for another interpreter and platform (``target``: Python
    version, ABI, platform tag), fetched into the same cache as :func:`wheel` and read in
    place like the others (nothing of it is imported or installed)."""
    python, abi, platform = target
    stem = f"{re.sub(r'[-_.]+', '_', dist)}-{version}-{abi}-{abi}-{platform}"
    with cache_lock():
        found = sorted(CACHE.glob(f"{stem}.whl"))
        if not found:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--disable-pip-version-check", "-q", "--python-version", python,
                 "--implementation", "cp", "--abi", abi, "--platform", platform,
                 "-d", str(CACHE), f"{dist}=={version}"],
                check=False, capture_output=True, text=True)
            found = sorted(CACHE.glob(f"{stem}.whl"))
            if done.returncode != 0 or not found:
                pytest.fail(f"cannot download the real wheel {dist}=={version} ({platform}, "
                            f"{abi}) into {CACHE}: {(done.stderr or done.stdout)[-600:]}",
                            pytrace=False)
    return Wheel(dist, version, found[-1])


@pytest.fixture(scope="module")
def musa() -> Wheel:
    return foreign_wheel(*MOONCAKE_MUSA, MUSA_TARGET)


def test_the_musa_build_is_read_from_its_binaries(musa: Wheel) -> None:
    # MusaTransport beside rdma and tcp, and the nvlink transport's classes (compiled for
    # MUSA in this build); no Ascend transport.
    build = installed_build(str(musa.unpack("mooncake") / "engine.so"))
    assert (build.ascend, set(build.protocols)) == (None, {"musa", "nvlink", "rdma", "tcp"})


def test_the_musa_build_needs_the_musa_driver_and_runtime(musa: Wheel) -> None:
    for member in ("mooncake/engine.so", "mooncake/store.so"):
        assert {"libmusa.so.1", "libmusart.so.5", "libibverbs.so.1"} <= set(
            musa.needed(member)), member
    assert "libmusa.so.1" in musa.needed("mooncake/nvlink_allocator.so")
    assert needed(musa.file("mooncake/engine.so")) == musa.needed("mooncake/engine.so")


def test_the_musa_wheel_ships_the_master_but_no_process_group(musa: Wheel) -> None:
    # mooncake/pg.py imports mooncake.pg_<torch version>, which this wheel does not ship:
    # no `mooncake` torch.distributed backend on MUSA from it.
    assert "mooncake/mooncake_master" in musa.members
    assert "mooncake/pg.py" in musa.members
    assert not [m for m in musa.members if "/pg_" in m or "libmooncake_pg" in m]
    assert not [m for m in musa.members if m.endswith(".so") and "cpython-311" in m]
