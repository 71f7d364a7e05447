#!/usr/bin/env bash
# The GPU checks in one run, on a machine with CUDA, PyTorch and Triton but no registry access:
# installs the kernels from source distributions in .whl/ (see README "GPU path"), runs
# tests/test_gpu.py, then bench/gpu_core.py and bench/decode_speed.py at the 2.7b shape.
#
#   mkdir -p .whl && cp mamba_ssm-*.whl causal_conv1d-*.tar.gz .whl/   # made as the README says
#   OUT=/tmp/gpu_out bash scripts/gpu_check.sh
#
# Everything it prints is also under $OUT (logs and JSON). The full CUDA build of causal-conv1d runs
# in the background while the rest runs (NO_CONV_BUILD=1: not at all); its time is in
# $OUT/conv_build.log when it finishes in time. BENCH_ARGS: extra flags of bench/gpu_core.py.
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
PY=${PY:-python3}
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
$PY -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"

# 1. causal-conv1d's full CUDA build, in the background: its wall time is the README's figure
if [ -z "${NO_CONV_BUILD:-}" ] && ls .whl/causal_conv1d-*.tar.gz >/dev/null 2>&1; then
  (s=$(date +%s)
   CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-6} $PY -m pip wheel --no-deps --no-build-isolation --no-index \
     -w /tmp/conv_wheel .whl/causal_conv1d-*.tar.gz > "$OUT/conv_build.log" 2>&1
   echo "conv build rc=$? seconds=$(( $(date +%s) - s ))" >> "$OUT/conv_build.log") &
fi

# 2. mamba-ssm, Triton kernels only (a pure-Python wheel: no compiler)
s=$(date +%s.%N)
$PY -m pip install -q --no-deps --no-index --no-cache-dir --target /tmp/site .whl/mamba_ssm-*.whl || exit 1
stamp "mamba-ssm (Triton only) installed in $($PY -c "import time; print(round(time.time() - $s, 1))") s"
export PYTHONPATH=/tmp/site:$PWD
$PY -c "from picaso_core.engine import kernels; print('installed:', kernels.installed()); print('why mamba_ssm itself did not import:', kernels.import_errors.get('mamba_ssm'))"

# 3. the GPU tests (MAMBA_DETERMINISTIC=1: one autotuning config per Triton kernel, to spare the
#    compile time; the numerics are the same kernels')
stamp "tests"
MAMBA_DETERMINISTIC=1 timeout ${TEST_TIMEOUT:-240} $PY -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_kernels.py tests/test_triton_step.py -rA 2>&1 \
  | tee "$OUT/pytest.log" | grep -E "passed|failed|PASSED|FAILED|ERROR|Error|assert" | head -80

# 4. the side-by-side benchmark (production autotuning)
stamp "bench/gpu_core.py"
timeout ${BENCH_TIMEOUT:-300} $PY bench/gpu_core.py --repeats ${REPEATS:-5} --json "$OUT/gpu_core.json" ${BENCH_ARGS:-} 2>&1 \
  | tee "$OUT/gpu_core.log"

# 5. decode at the 2.7b shape, bfloat16, 7 rows
stamp "bench/decode_speed.py"
timeout ${DECODE_TIMEOUT:-150} $PY bench/decode_speed.py --shape mamba2-2.7b --device cuda --dtype bfloat16 --batched-only \
  --lengths 16,4096 --repeats 3 --json "$OUT/decode_2.7b.json" 2>&1 | tee "$OUT/decode_2.7b.log"

# 6. the conv build, if it finished: install it and run the conv kernel tests
stamp "causal-conv1d build: $(tail -1 "$OUT/conv_build.log" 2>/dev/null)"
if ls /tmp/conv_wheel/causal_conv1d-*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-deps --no-index --target /tmp/site /tmp/conv_wheel/causal_conv1d-*.whl
  MAMBA_DETERMINISTIC=1 timeout 120 $PY -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "conv or decode or graph" 2>&1 \
    | tee "$OUT/pytest_conv.log" | tail -5
fi
stamp "done"
