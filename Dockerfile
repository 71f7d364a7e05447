# PICASO Explorer as a Hugging Face Space (sdk: docker, app_port: 7860); see README.md ("Deploying as a Hugging Face Space").
#   CPU: docker build -t picaso-explorer . && docker run -p 7860:7860 picaso-explorer
#   GPU: docker build --build-arg TORCH_INDEX_URL=https://pypi.org/simple --build-arg PICASO_DEVICE=cuda -t picaso-explorer:gpu .
#        docker run --gpus all -p 7860:7860 picaso-explorer:gpu
#   docker run -p 7860:7860 -e PICASO_MODEL=state-spaces/mamba2-130m -e PICASO_CORPUS=msmarco picaso-explorer
# A Space passes its variables as build arguments: set TORCH_INDEX_URL and PICASO_DEVICE there for GPU hardware.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# Where torch 2.13.0 comes from. CPU (default): the CPU wheel index; from PyPI alone the pin pulls
# gigabytes of CUDA libraries. GPU: https://pypi.org/simple, whose Linux x86_64 wheel is the CUDA 13.0
# build (it bundles the CUDA runtime; the host needs an NVIDIA driver >= 580), or a CUDA 12 index of
# download.pytorch.org for an older driver.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# cuda on GPU hardware (app.py --device); empty: CPU
ARG PICASO_DEVICE=

# Spaces run the container as user 1000; everything it writes (state stores, hub cache) lives in its home.
# NUMBA_CPU_NAME=generic: numba keys its disk cache by the CPU's name and features, so code compiled
# for the builder's CPU would be compiled again on a Space's different runtime CPU; generic x86-64 code
# is valid on both (the UMAP step below).
RUN useradd --create-home --uid 1000 user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    NUMBA_CPU_NAME=generic \
    HF_HOME=/home/user/.cache/huggingface \
    PICASO_CACHE=/home/user/.cache/picaso_explorer \
    PICASO_DEVICE=${PICASO_DEVICE} \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860
WORKDIR /home/user/app

# torch first, from TORCH_INDEX_URL; requirements.txt then finds it installed.
COPY --chown=user requirements.txt .
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==2.13.0" \
 && pip install --no-cache-dir -r requirements.txt
# GPU hardware: mamba-ssm's Triton kernels (the Mamba-2 scan, the decode update, the norms), built
# from its source distribution with no CUDA compiler in ~10 s (docs/gpu.md says why each flag).
RUN if [ "${PICASO_DEVICE}" = "cuda" ]; then \
      pip install --no-cache-dir wheel packaging einops \
   && MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE \
      pip install --no-cache-dir --no-deps --no-build-isolation "mamba-ssm==2.3.2.post1"; \
    fi

USER user
COPY --chown=user . .
# Encode the whole demo state store into the image (~40 s on 2 cores), so no visitor waits for an
# encoding. The app would also start without it (contexts are then encoded on first use); with
# another PICASO_MODEL / PICASO_CORPUS that is what happens, into PICASO_CACHE.
RUN HF_HUB_OFFLINE=1 python -c "from picaso_core.session import load_resources; load_resources('demo', 'demo', encode_all=True)"
# Compile UMAP's numba code into the image too (numba's cache in the user's home: ~40 s here once),
# so the State soup tab's first UMAP map loads it in seconds on any x86-64 CPU (NUMBA_CPU_NAME above;
# picaso_core/analysis/soup_projection.py, _cache_umap_numba).
RUN python -c "from picaso_core.analysis.soup_projection import warm_up_umap; warm_up_umap()"
# The guided tour's results (docs/tour.md: ~80 s on 2 cores), keyed by the demo model's and corpus's
# fingerprints, so every step of the tour opens at once; another model or corpus builds its own in
# the background after start.
RUN HF_HUB_OFFLINE=1 python -m picaso_core.ui.tour build

EXPOSE 7860
CMD ["python", "app.py"]
