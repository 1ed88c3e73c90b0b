# tunehub's two images, built once (docs/deploy.md):
#   server: the API on python:3.12-slim        docker build --target server -t tunehub-server .
#   worker: a GPU worker on a CUDA devel base  docker build --target worker -t tunehub-worker .
# docker-compose.yml builds both (profiles `server` and `worker`). Everything is installed here,
# at build time; a container start installs nothing.
#
# The package reads kernel_templates/, migrations/ and alembic.ini from the checkout beside
# service/ and tuner/ (tuner/render.py, service/store/db.py), so each image keeps the source tree
# at /app, owned by root and read-only to the service user, and installs it in place
# (`pip install -e`), as the README does; a wheel alone would lack them.

ARG PYTHON_IMAGE=python:3.12-slim
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04

# -- server: the API (`tunehub serve --no-local-worker`), migrating first ---------------------
FROM ${PYTHON_IMAGE} AS server
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TUNEHUB_HOST=0.0.0.0 \
    TUNEHUB_PORT=8765 \
    TUNEHUB_DATA_DIR=/data \
    TUNEHUB_CACHE_DIR=/data/cache
RUN groupadd --system --gid 10001 tunehub \
 && useradd --system --uid 10001 --gid tunehub --create-home --shell /usr/sbin/nologin tunehub \
 && mkdir -p /data/cache && chown -R tunehub:tunehub /data
WORKDIR /app
# the dependencies first, in a layer a source change keeps; then the package itself
COPY pyproject.toml deploy/requirements.py /tmp/deps/
RUN cd /tmp/deps && python requirements.py > requirements.txt \
 && pip install -r /tmp/deps/requirements.txt && rm -rf /tmp/deps
COPY . /app
RUN pip install -e /app && python -m compileall -q /app/service /app/tuner
USER tunehub
EXPOSE 8765
VOLUME ["/data"]
ENTRYPOINT ["/app/deploy/serve.sh"]

# -- worker: `tunehub worker` on this host's GPUs (nvcc, CUTLASS, cuBLASLt, cuDNN, torch) -------
FROM ${CUDA_IMAGE} AS worker
# torch's CUDA 13 wheels (the harness times and verifies with torch; docs/cuda.md)
ARG TORCH_SPEC="torch==2.11.0"
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:${PATH} \
    TUNEHUB_DATA_DIR=/var/lib/tunehub \
    TUNEHUB_CACHE_DIR=/var/cache/tunehub
# g++: nvcc's host compiler and the CPU backend's compiler
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends python3 python3-venv g++ ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv \
 && pip install --index-url "${TORCH_INDEX}" "${TORCH_SPEC}"
RUN groupadd --system --gid 10001 tunehub \
 && useradd --system --uid 10001 --gid tunehub --create-home --shell /usr/sbin/nologin tunehub \
 && mkdir -p /var/lib/tunehub /var/cache/tunehub \
 && chown tunehub:tunehub /var/lib/tunehub /var/cache/tunehub
WORKDIR /app
# the dependencies with the `cuda` extra (CUTLASS headers) and the `vendor` extra (cuBLASLt, cuDNN;
# about 2 GB), and nvidia-ml-py (device discovery, clocks, power), in a layer a source change
# keeps; then the package itself
COPY pyproject.toml deploy/requirements.py /tmp/deps/
RUN cd /tmp/deps && python requirements.py cuda vendor > requirements.txt \
 && pip install -r /tmp/deps/requirements.txt nvidia-ml-py && rm -rf /tmp/deps
COPY . /app
RUN pip install -e "/app[cuda,vendor]" \
 && python -m compileall -q /app/service /app/tuner
USER tunehub
VOLUME ["/var/cache/tunehub"]
ENTRYPOINT ["/app/deploy/worker.sh"]
CMD ["--backend", "cuda"]
