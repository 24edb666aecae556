#!/usr/bin/env bash
# The CUDA checks and benchmarks, in one run of a few minutes on a machine with an NVIDIA GPU:
#
#   bash scripts/gpu_check.sh OUT
#
# writes into the folder OUT: log.txt (everything printed), env.txt (GPU, driver, versions), pytest.xml (the
# `pytest -m gpu` result), grid.txt and grid.json (the buffer grid on CUDA against sb3-contrib's buffers on the same
# GPU), learn.txt (`bench learn --device cuda`) and spaces.txt (the cost-of-masking cells on CUDA).
# Each step runs even when the one before it failed; the cheapest and most telling come first.
#
# A machine with no package index (a GPU machine lent without network) can bring the missing packages as wheels:
# a folder of .whl files named by WHEELS (default: .whl beside or above this checkout) is installed with
# --no-index --no-deps into a folder of its own under /tmp, put first on PYTHONPATH, and only when torchrl or
# sb3-contrib cannot be imported; no Python environment is changed. PYTHON names the interpreter (default python3).
# STEPS picks steps by name (default: "tests grid learn spaces"), for a shorter rerun.
set -u -o pipefail
out=${1:?usage: bash scripts/gpu_check.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
exec > >(tee "$out/log.txt") 2>&1

step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
steps=" ${STEPS:-tests grid learn spaces} "
wanted() { [[ $steps == *" $1 "* ]]; }

step "packages"
if ! "$py" -c "import torchrl, sb3_contrib" 2>/dev/null; then
    wheels=${WHEELS:-}
    for candidate in "$root/.whl" "$root/../.whl"; do
        [ -z "$wheels" ] && [ -d "$candidate" ] && wheels=$candidate
    done
    if [ -n "$wheels" ]; then
        site=/tmp/torchrl-mask-gpu-check-site
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
            "$wheels"/*.whl && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    else
        echo "torchrl or sb3-contrib is missing and no wheel folder was found (set WHEELS)"
    fi
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

step "environment"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "no nvidia-smi"
    "$py" - <<'EOF'
import importlib.metadata as md
import sys

import torch

print("python", sys.version.split()[0])
for name in ("torch", "torchrl", "tensordict", "stable_baselines3", "sb3_contrib", "gymnasium", "numpy"):
    print(name, md.version(name))
print("cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(), "capability", torch.cuda.get_device_capability())
EOF
    date -u +%Y-%m-%d
} | tee "$out/env.txt"

# Seen on an H200 (2026-12): tests 30 s, grid 2 min, learn 80 s, spaces 1-2 min.
if wanted tests; then
    step "a. pytest -m gpu"
    timeout 120 "$py" -m pytest -m gpu tests/test_gpu.py tests/test_storage.py -q -rA -p no:cacheprovider -n 4 \
        --junitxml="$out/pytest.xml" || echo "pytest -m gpu: exit $?"
fi
if wanted grid; then
    step "b. buffer grid on cuda against sb3-contrib's buffers on cuda"
    timeout 150 "$py" -m torchrl_mask bench --device cuda --rounds 3 --memory none --json "$out/grid.json" \
        | tee "$out/grid.txt" || echo "bench grid: exit $?"
fi
if wanted learn; then
    step "c. bench learn on cuda against sb3-contrib on cuda"
    timeout 120 "$py" -m torchrl_mask bench learn --device cuda --rounds 3 --workloads dict-dummy multidiscrete \
        | tee "$out/learn.txt" || echo "bench learn: exit $?"
fi
if wanted spaces; then
    step "c. cost of masking on cuda: SB3's PPO, sb3-contrib and ours"
    timeout 120 "$py" -m torchrl_mask bench learn --action-spaces --device cuda --rounds 3 --observations box \
        --batch-sizes 64 --spaces "Discrete(4096)" "MultiBinary(339)" | tee "$out/spaces.txt" \
        || echo "bench spaces: exit $?"
fi

step "done"
