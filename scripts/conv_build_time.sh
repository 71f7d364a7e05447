#!/usr/bin/env bash
# How long causal-conv1d's CUDA build compiles, on a machine without a GPU or a CUDA toolkit: nvcc
# and the CUDA headers come from NVIDIA's PyPI wheels, and the build compiles against the installed
# torch's headers. Only the compile is timed: a CPU torch has no libtorch_cuda to link against, so
# the final link fails (expected) and no usable wheel comes out. docs/gpu.md quotes the figure.
#
#   bash scripts/conv_build_time.sh                                   # one architecture (sm_90, an H100)
#   CONV_GENCODE=stock bash scripts/conv_build_time.sh                # every architecture its nvcc knows
#
# Needs: pip access to PyPI (or the wheels in $WHEELS), g++, .whl/causal_conv1d-1.7.0.tar.gz (README).
set -u
WORK=${WORK:-/tmp/conv_build_time}
WHEELS=${WHEELS:-$WORK/wheels}
GENCODE=${CONV_GENCODE:-arch=compute_90,code=sm_90}
PY=${PY:-python3}
mkdir -p "$WORK" "$WHEELS"
ls "$WHEELS"/nvidia_cuda_nvcc-*.whl >/dev/null 2>&1 || $PY -m pip download -q --no-deps -d "$WHEELS" \
  nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cuda-crt nvidia-nvvm ninja || exit 1
rm -rf "$WORK/kit" "$WORK/src" && $PY -m pip install -q --no-deps --target "$WORK/kit" "$WHEELS"/*.whl || exit 1
CUDA=$(ls -d "$WORK"/kit/nvidia/cu*)
ln -sfn lib "$CUDA/lib64" && ln -sf "$(basename "$(ls "$CUDA"/lib/libcudart.so.*)")" "$CUDA/lib/libcudart.so"
# a CPU torch ships c10/cuda's headers but not the one its CMake generates
mkdir -p "$WORK/stub/c10/cuda/impl" && printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' \
  > "$WORK/stub/c10/cuda/impl/cuda_cmake_macros.h"
mkdir -p "$WORK/src" && tar xzf .whl/causal_conv1d-*.tar.gz -C "$WORK/src" && SRC=$(ls -d "$WORK"/src/causal_conv1d-*)
$PY - "$SRC/setup.py" "$GENCODE" <<'PYEOF'
import sys
p, gencode = sys.argv[1], sys.argv[2]
s = open(p).read()
# torch.utils.cpp_extension sets CUDA_HOME to None when torch has no CUDA: take the one given here
s = s.replace("    CUDA_HOME,\n", "", 1).replace(
    "\nwith open(\"README.md\"", "\nimport os as _os\nCUDA_HOME = __import__('torch.utils.cpp_extension').utils.cpp_extension.CUDA_HOME"
    " = _os.environ['CUDA_HOME']\n\nwith open(\"README.md\"", 1)
mark = "    # HACK: The compiler flag"
assert mark in s, "causal-conv1d's setup.py changed"
if gencode != "stock":
    s = s.replace(mark, f"    cc_flag = ['-gencode', {gencode!r}]\n" + mark, 1)
open(p, "w").write(s)
PYEOF
export CUDA_HOME=$CUDA CPATH=$WORK/stub PATH=$CUDA/bin:$WORK/kit/bin:$PATH
echo "nvcc $(nvcc --version | tail -2 | head -1); $(nproc) cores; gencode: $GENCODE"
s=$(date +%s)
CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-$(nproc)} $PY -m pip wheel -v --no-deps --no-build-isolation --no-index \
  -w "$WORK/out" "$SRC" > "$WORK/build.log" 2>&1
e=$(date +%s)
compiled=$(ls "$SRC"/build/temp.*/csrc/*.o 2>/dev/null | wc -l)
echo "sources compiled: $compiled of 4 in $(( e - s )) s (the link needs a CUDA torch: $(grep -c 'cannot find -ltorch_cuda' "$WORK/build.log") such errors); log: $WORK/build.log"
