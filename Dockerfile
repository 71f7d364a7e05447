# PICASO Explorer as a Hugging Face Space (sdk: docker, app_port: 7860); see README.md ("Deploying as a Hugging Face Space").
#   docker build -t picaso-explorer . && docker run -p 7860:7860 picaso-explorer
#   docker run -p 7860:7860 -e PICASO_MODEL=state-spaces/mamba2-370m -e PICASO_CORPUS=wikitext picaso-explorer
FROM python:3.11-slim

# Spaces run the container as user 1000; everything it writes (state stores, hub cache) lives in its home.
RUN useradd --create-home --uid 1000 user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/home/user/.cache/huggingface \
    PICASO_CACHE=/home/user/.cache/picaso_explorer \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860
WORKDIR /home/user/app

# torch first, from the CPU wheel index: from PyPI alone the pinned version pulls gigabytes of CUDA
# libraries. requirements.txt then finds it installed.
COPY --chown=user requirements.txt .
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0" \
 && pip install --no-cache-dir -r requirements.txt

USER user
COPY --chown=user . .
# Encode the whole demo state store into the image (~40 s on 2 cores), so no visitor waits for an
# encoding. The app would also start without it (contexts are then encoded on first use); with
# another PICASO_MODEL / PICASO_CORPUS that is what happens, into PICASO_CACHE.
RUN HF_HUB_OFFLINE=1 python -c "from picaso_core.ui.resources import load_resources; load_resources('demo', 'demo', encode_all=True)"

EXPOSE 7860
CMD ["python", "app.py"]
