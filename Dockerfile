# syntax=docker/dockerfile:1
#
# The MST service on the NVIDIA container runtime: CUDA 13 runtime, Python and CuPy.
#
#   docker build -t mst-service .
#   docker run --rm --gpus all -p 8000:8000 -v mst-data:/data mst-service
#
# Hosts whose driver is older than CUDA 13 (< 580) build the CUDA 12 variant:
#   docker build -t mst-service:cuda12 \
#     --build-arg CUDA_IMAGE=nvidia/cuda:12.9.1-runtime-ubuntu24.04 --build-arg GPU_EXTRA=gpu-cuda12 .
# Without a GPU the same image serves on the NumPy backend (MST_BACKEND=auto falls back to the CPU).

ARG CUDA_IMAGE=nvidia/cuda:13.0.2-runtime-ubuntu24.04
FROM ${CUDA_IMAGE}

# Which extra of pyproject.toml provides CuPy: gpu (CUDA 13) or gpu-cuda12.
ARG GPU_EXTRA=gpu
# More extras of pyproject.toml, space-separated: `ray` for the Ray worker pool (docker/compose.ray.yml).
ARG EXTRAS=""

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Ubuntu 24.04's Python 3.12 in a virtual environment (the system one is externally managed), and
# the unprivileged user the service runs as. Ubuntu's package versions are not pinned: the base
# image tag pins the release, and security updates should land on rebuild.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /home/mst --shell /usr/sbin/nologin mst \
 && mkdir -p /data \
 && chown mst:mst /data

WORKDIR /app

# Dependency layer: built from pyproject.toml alone, so editing the source does not reinstall
# CuPy and its CUDA wheels. The list is read from pyproject.toml, the one place it is kept: the
# core, the GPU extra, Arrow/Parquet (arrow), the compiled dendrogram (fast) and EXTRAS.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; e = p['optional-dependencies']; more = sum((e[x] for x in '${EXTRAS}'.split()), []); print('\n'.join(p['dependencies'] + e['${GPU_EXTRA}'] + e['arrow'] + e['fast'] + more))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt "setuptools>=77" \
 && rm /tmp/requirements.txt

# Source layer: the two packages (the .cu kernels travel as package data), then the container's
# own scripts.
COPY README.md ./
COPY gpu_core/ gpu_core/
COPY service/ service/
RUN pip install --no-deps --no-build-isolation . \
 && rm -rf build ./*.egg-info
COPY docker/entrypoint.sh docker/healthcheck.py /app/docker/

# The device: all GPUs the runtime grants (compose narrows it), compute for CUDA and utility for
# nvidia-smi. The service: listen on all interfaces of the container, keep state in the volume,
# and keep CuPy's compiled kernels and Numba's compiled host passes (HDBSCAN*, single linkage) there
# too, so a restarted container warms up faster (the package's own folder is not writable by the
# service's user, so Numba could not cache next to it).
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    MST_HOST=0.0.0.0 \
    MST_PORT=8000 \
    MST_DATA_DIR=/data \
    MST_BACKEND=auto \
    CUPY_CACHE_DIR=/data/.cupy/kernel_cache \
    NUMBA_CACHE_DIR=/data/.numba

VOLUME ["/data"]
EXPOSE 8000
USER 10001:10001

# /readyz is 200 once a worker is up and its device answers; the start period covers the worker's
# start-up and kernel warm-up (MST_WORKER_START_TIMEOUT_S, 300 s by default). No curl: stdlib only.
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
  CMD ["/opt/venv/bin/python", "/app/docker/healthcheck.py"]

ENTRYPOINT ["/app/docker/entrypoint.sh"]
CMD ["mst-service"]
