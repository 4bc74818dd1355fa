"""``import_backend``: import torch and the vendor plugin the profile names.

Importing is a step of its own because on real machines it is where start-up
fails first (a missing wheel, CANN not sourced, a driver library missing), and
because Ascend workers must import torch_npu before anything touches Mooncake.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from initorch.plugin import StepContext, StepError, setting, step

# The modules a profile may make import_backend import.  A profile is data: naming
# any module on the path would let it run code (``backend_package: this`` printed the
# Zen of Python).  A plugin that supports another accelerator adds its package and
# device module with ``registry.settings.extend_choices("device.backend_package",
# [...])`` -- the same list is then refused at plan time (exit 2) for anything else.
BACKEND_PACKAGES = ("torch", "torch_npu", "torch_musa")
TORCH_MODULES = ("torch.cpu", "torch.cuda", "torch.mps", "torch.musa", "torch.npu", "torch.xpu")
BACKEND_PACKAGE = setting(
    "device.backend_package", str, required=True, choices=BACKEND_PACKAGES,
    description="package import_backend imports after torch: torch, or the vendor plugin "
                "that registers the device (torch_npu, torch_musa); plugins add theirs")
TORCH_MODULE = setting(
    "device.torch_module", str, required=True, choices=TORCH_MODULES,
    description="the torch device module set_device uses (torch.cuda, torch.npu; torch.cuda "
                "on ROCm); plugins add theirs")

INSTALL_HINTS = {
    "torch": "pip install 'initorch[torch]' (or a torch build for your accelerator)",
    "torch_npu": "pip install torch-npu matching your torch version, install the Ascend CANN "
                 "toolkit, and source /usr/local/Ascend/ascend-toolkit/set_env.sh",
    "torch_musa": "install torch_musa from Moore Threads (it is not on PyPI) with the MUSA "
                  "toolkit",
}


def import_or_explain(package: str) -> ModuleType:
    """Import ``package``; a failure becomes one :class:`StepError` with the install hint."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise StepError(
            f"cannot import {package}: {exc}",
            hint=INSTALL_HINTS.get(package, f"install the package that provides {package}"),
        ) from exc


@step(
    "import_backend",
    description="Import torch and the profile's vendor plugin; check its device module exists",
    settings=(BACKEND_PACKAGE, TORCH_MODULE),
)
def import_backend(ctx: StepContext) -> ModuleType:
    """Returns the torch device module (``torch.npu``, ``torch.cuda``...)."""
    import_or_explain("torch")
    import_or_explain(ctx.setting("device.backend_package"))
    module_path: str = ctx.setting("device.torch_module")
    try:
        return importlib.import_module(module_path)
    except ImportError as exc:
        raise StepError(
            f"{ctx.setting('device.backend_package')} imported, but {module_path} is not "
            f"available: {exc}",
            hint="the vendor plugin did not register its device module; check its version "
                 "matches torch",
        ) from exc


STEPS = (import_backend,)
