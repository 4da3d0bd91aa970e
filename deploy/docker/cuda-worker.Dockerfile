# syntax=docker/dockerfile:1
# A worker of GPU deployments on an NVIDIA GPU, as the provisioner's Kubernetes backend and the chart's GPU worker
# pools run it: `python -m luminal.scheduler.worker_process DEPLOYMENT_ID WORKER_ID GPU_TYPE`. The node needs an
# NVIDIA driver of CUDA 13 (580 or newer) and the NVIDIA container toolkit.
#
# No image is published: build it from the repository root and push it to your own registry, e.g.
#   docker build -f deploy/docker/cuda-worker.Dockerfile -t registry.example.com/luminal-cloud-cuda-worker:0.1.0 .
#   docker push registry.example.com/luminal-cloud-cuda-worker:0.1.0

FROM python:3.12-slim AS wheel
WORKDIR /src
# The same sources as platform.Dockerfile's wheel (tests/deploy/test_dockerfiles.py checks that they agree).
COPY pyproject.toml README.md ./
COPY luminal/ luminal/
COPY compiler/ compiler/
COPY runtime/ runtime/
COPY store/ store/
COPY gateway/ gateway/
COPY scheduler/ scheduler/
COPY batching/ batching/
COPY provisioner/ provisioner/
COPY cli/ cli/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# The base flavour holds the CUDA runtime alone: NVRTC and cuBLAS come as wheels with CuPy (the `cuda` extra), and
# nothing compiles host code on a GPU worker.
FROM nvidia/cuda:13.0.0-base-ubuntu24.04
# Ubuntu's Python 3.12 in a virtual environment (Ubuntu refuses pip installs into its own, PEP 668).
# Versions unpinned (hadolint DL3008): the distribution drops a package's version once a security update
# replaces it, so a pin breaks the build within weeks; the base image's tag fixes the release, a rebuild the fixes.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/luminal
# Uid 10001 on a read-only root with volumes at /var/lib/luminal and /tmp, as the chart and the provisioner run it:
# the home, the program cache, NVRTC's extracted headers and its CUBINs, and CuPy's kernel cache live there.
RUN useradd --no-log-init --uid 10001 --user-group --home-dir /var/lib/luminal --create-home \
    --shell /usr/sbin/nologin luminal
ENV PATH=/opt/luminal/bin:$PATH \
    LUMINAL_DATA_DIR=/var/lib/luminal \
    LUMINAL_CACHE_DIR=/var/lib/luminal/cache \
    CUPY_CACHE_DIR=/var/lib/luminal/cupy \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    pip install --no-cache-dir "$(echo /wheels/luminal_cloud-*.whl)[cuda]"
USER 10001:10001
WORKDIR /var/lib/luminal
ENTRYPOINT ["python", "-m", "luminal.scheduler.worker_process"]
