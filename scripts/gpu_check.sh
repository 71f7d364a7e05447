#!/usr/bin/env bash
# The GPU checks in one run, on a machine with CUDA, PyTorch and Triton but no registry access:
# installs the kernels from source distributions in .whl/ (see README "GPU path"), runs
# tests/engine/test_gpu.py, then bench/gpu_core.py and bench/decode_speed.py at the 2.7b shape.
#
#   mkdir -p .whl && cp mamba_ssm-*.whl causal_conv1d-*.tar.gz .whl/   # made as the README says
#   OUT=/tmp/gpu_out bash scripts/gpu_check.sh
#
# Everything it prints is also under $OUT (logs and JSON). The full CUDA build of causal-conv1d runs
# in the background while the rest runs (NO_CONV_BUILD=1: not at all); its time is in
# $OUT/conv_build.log when it finishes in time. BENCH_ARGS: extra flags of bench/gpu_core.py; NO_BENCH=1
# skips it; DECODE_LENGTHS: the decode benchmark's --lengths.
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
PY=${PY:-python3}
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
$PY -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"

# 1. causal-conv1d's CUDA build, in the background at the lowest priority (the benchmarks' host
#    thread keeps its core): its wall time is the README's figure. The stock build compiles every
#    architecture its nvcc knows (9 with CUDA 13); CONV_GENCODE (e.g. arch=compute_90,code=sm_90 for an
#    H100) builds that one only. With ninja (a wheel in .whl/ is installed first) the 4 sources compile
#    in parallel, each with nvcc --threads 4; without it one after another.
if [ -z "${NO_CONV_BUILD:-}" ] && ls .whl/causal_conv1d-*.tar.gz >/dev/null 2>&1; then
  ls .whl/ninja-*.whl >/dev/null 2>&1 && $PY -m pip install -q --no-deps --no-index --target /tmp/build_tools .whl/ninja-*.whl
  export PATH=/tmp/build_tools/bin:$PATH
  src=$(ls .whl/causal_conv1d-*.tar.gz)
  if [ -n "${CONV_GENCODE:-}" ]; then  # one architecture: the gencode list replaced before the build
    mkdir -p /tmp/convsrc && tar xzf "$src" -C /tmp/convsrc && src=$(ls -d /tmp/convsrc/causal_conv1d-*)
    $PY - "$src/setup.py" "$CONV_GENCODE" <<'PYEOF'
import sys
p, gencode = sys.argv[1], sys.argv[2]
s = open(p).read()
mark = "    # HACK: The compiler flag"
assert mark in s, "causal-conv1d's setup.py changed: no place for the gencode list"
open(p, "w").write(s.replace(mark, f"    cc_flag = ['-gencode', {gencode!r}]\n" + mark, 1))
PYEOF
  fi
  (s=$(date +%s)
   echo "ninja: $(command -v ninja || echo none); nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo none); gencode: ${CONV_GENCODE:-stock}; nproc $(nproc)"
   CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-4} nice -n 19 $PY -m pip wheel --no-deps --no-build-isolation --no-index \
     -w /tmp/conv_wheel "$src"
   echo "conv build rc=$? seconds=$(( $(date +%s) - s ))") > "$OUT/conv_build.log" 2>&1 &
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
MAMBA_DETERMINISTIC=1 timeout ${TEST_TIMEOUT:-180} $PY -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py tests/engine/test_kernels.py tests/engine/test_triton_step.py -rA 2>&1 \
  | tee "$OUT/pytest.log" | grep -E "passed|failed|PASSED|FAILED|ERROR|Error|assert" | head -80

# 4. decode at the 2.7b shape, bfloat16, 7 rows
stamp "bench/decode_speed.py"
timeout ${DECODE_TIMEOUT:-150} $PY bench/decode_speed.py --shape mamba2-2.7b --device cuda --dtype bfloat16 --batched-only \
  --lengths ${DECODE_LENGTHS:-16,4096} --repeats 3 --json "$OUT/decode_2.7b.json" 2>&1 | tee "$OUT/decode_2.7b.log"

# 5. the side-by-side benchmark (production autotuning; NO_BENCH=1: skipped)
if [ -z "${NO_BENCH:-}" ]; then
  stamp "bench/gpu_core.py"
  timeout ${BENCH_TIMEOUT:-300} $PY bench/gpu_core.py --repeats ${REPEATS:-5} --json "$OUT/gpu_core.json" ${BENCH_ARGS:-} 2>&1 \
    | tee "$OUT/gpu_core.log"
fi

# 6. the conv build, if it finished: install it and run the conv kernel tests
stamp "causal-conv1d build: $(tail -1 "$OUT/conv_build.log" 2>/dev/null)"
if ls /tmp/conv_wheel/causal_conv1d-*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-deps --no-index --target /tmp/site /tmp/conv_wheel/causal_conv1d-*.whl
  $PY -c "from picaso_core.engine import kernels; print('installed:', kernels.installed())"
  MAMBA_DETERMINISTIC=1 timeout ${CONV_TEST_TIMEOUT:-120} $PY -m pytest -q -p no:cacheprovider tests/engine/test_gpu.py tests/engine/test_kernels.py -rA 2>&1 \
    | tee "$OUT/pytest_conv.log" | grep -E "passed|failed|PASSED|FAILED|ERROR|Error|assert" | head -60
  [ -n "${CONV_BENCH:-}" ] && timeout ${CONV_BENCH_TIMEOUT:-120} $PY bench/decode_speed.py --shape mamba2-2.7b --device cuda \
    --dtype bfloat16 --batched-only --lengths 16 --repeats 3 --json "$OUT/decode_2.7b_conv.json" 2>&1 | tee "$OUT/decode_2.7b_conv.log"
fi
stamp "done"
