"""initorch-vllm: initorch inside real vLLM start-ups (verify, check, drift).

vLLM loads :func:`load` through its ``vllm.general_plugins`` entry point in every process
it starts; initorch loads the ``vllm`` plugin (:mod:`initorch_vllm.registration`) and the
``initorch vllm`` command (:mod:`initorch_vllm.cli`).  Importing this package imports
neither vLLM nor torch.
"""

from initorch_vllm.plugin import load

__all__ = ["load"]
