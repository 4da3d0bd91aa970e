# syntax=docker/dockerfile:1
# The platform on the CPU, one image for each role the Helm chart gives it: `luminal serve` (gateway, scheduler,
# provisioner, compile jobs), `luminal compile-worker`, and the workers of CPU deployments that the provisioner's
# Kubernetes backend starts (`python -m luminal.scheduler.worker_process`).
#
# No image is published: build it from the repository root and push it to your own registry, e.g.
#   docker build -f deploy/docker/platform.Dockerfile -t registry.example.com/luminal-cloud:0.1.0 .
#   docker push registry.example.com/luminal-cloud:0.1.0

FROM python:3.12-slim AS wheel
WORKDIR /src
# What the wheel is built from and nothing more (tests/deploy/test_wheel_install.py builds one from this list).
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

FROM python:3.12-slim
# CPU programs are C compiled when they are loaded (runtime/cpu.py runs cc): g++ brings gcc and libc's headers.
# Versions unpinned (hadolint DL3008): the distribution drops a package's version once a security update
# replaces it, so a pin breaks the build within weeks; the base image's tag fixes the release, a rebuild the fixes.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*
# The chart runs every container as uid 10001 on a read-only root, with volumes at /var/lib/luminal and /tmp: the
# home, the platform's state and the compile caches all live in the first.
RUN useradd --no-log-init --uid 10001 --user-group --home-dir /var/lib/luminal --create-home \
    --shell /usr/sbin/nologin luminal
ENV LUMINAL_DATA_DIR=/var/lib/luminal \
    LUMINAL_CACHE_DIR=/var/lib/luminal/cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The wheel with the Kubernetes client (the chart's provisioner) and Celery (its compile workers); the wheel folder
# is mounted from the first stage, so it is no layer of this image.
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    pip install --no-cache-dir --root-user-action=ignore "$(echo /wheels/luminal_cloud-*.whl)[kubernetes,celery]"
USER 10001:10001
WORKDIR /var/lib/luminal
EXPOSE 8000
ENTRYPOINT ["luminal"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
