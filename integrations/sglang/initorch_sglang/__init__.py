"""initorch-sglang: initorch inside real SGLang start-ups (verify, drive, check, drift).

SGLang loads :func:`load` through its ``sglang.srt.plugins`` entry point; initorch loads
the ``sglang`` plugin (:mod:`initorch_sglang.registration`) and the ``initorch sglang``
command (:mod:`initorch_sglang.cli`).  Importing this package imports neither SGLang nor
torch.
"""

from initorch_sglang.plugin import load

__all__ = ["load"]
