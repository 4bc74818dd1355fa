#!/usr/bin/env bash
# Run the `cuda` profile for real on a machine with an NVIDIA GPU: an NCCL
# process group of one, the host pool pinned with cudaHostRegister, and (when
# the CUDA build of Mooncake is importable) the transfer engine forced to TCP, a
# managed mooncake_master, the Mooncake Store with the pool registered and KV
# pages verified.  Not part of CI: run it where a GPU is lent.  Uses the python
# that already has a CUDA build of torch.
#
#   scripts/cuda_smoke.sh [OUT_DIR]
#
# Writes OUT_DIR/cuda-run.json (run report) and OUT_DIR/cuda-trace.json.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out}
mkdir -p "$out"
python=${PYTHON:-python3}

"$python" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
      f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
PY

# initorch itself; its three small dependencies come from the machine when present.
"$python" -m pip install --quiet --no-deps -e . 2>/dev/null || "$python" -m pip install --quiet -e .

# The cuda profile means RDMA; without HCAs say TCP, and force it as Mooncake wants.
export MC_FORCE_TCP=1
settings=(--set hicache.host_pool_mb=256 --set device.mooncake_protocol=tcp)
if "$python" -c "import mooncake.engine" 2>/dev/null; then
    settings+=(--set checks.verify_transfer=true)
else
    echo "mooncake (CUDA build) not importable: running without Mooncake steps"
    settings+=(--set mooncake.enabled=false)
fi

for executor in sequential parallel; do
    "$python" -m initorch run --profile cuda --executor "$executor" "${settings[@]}" \
        --report "$out/cuda-run-$executor.json" --trace "$out/cuda-trace-$executor.json" \
        --log-format json 2>"$out/cuda-log-$executor.jsonl"
    echo "cuda profile, $executor executor: ok (report in $out/cuda-run-$executor.json)"
done
