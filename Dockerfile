# The daemon image for a pod sidecar. Not built in CI (no container engine
# there); `make test` lints it (hadolint) and covers everything it runs.
#   docker build -t squawk:0.1.0 .
#   docker run --rm -p 50051:50051 -v "$PWD/policy.yaml:/etc/squawk/policy.yaml:ro" \
#     squawk:0.1.0 --policy /etc/squawk/policy.yaml
FROM python:3.11-slim AS build
WORKDIR /src
# make only runs the code generation, in this stage; its version follows
# the base image's Debian release, so it is not pinned.
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*
COPY Makefile pyproject.toml README.md constraints.txt ./
COPY protos protos
COPY sidecar sidecar
COPY clients/python clients/python
# The same code generation as a checkout's `make gen` (which installs the
# three distributions and the generator, no test tool), then the wheels of
# the shared core and the daemon (the client is not needed in the image).
RUN make gen PYTHON=python && \
    .venv/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ./sidecar/core .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
COPY --from=build /src/constraints.txt /wheels/
# With the redis extra: `state.store: redis` (or SQUAWK_STATE_URL) works as
# shipped; every dependency at the version the lock names, as the tests ran it.
RUN pip install --no-cache-dir -c /wheels/constraints.txt \
      /wheels/squawk_core-*.whl "$(echo /wheels/squawk_daemon-*.whl)[redis]" && \
    rm -rf /wheels
USER 65532:65532
EXPOSE 50051
# Listen on all interfaces inside the pod's network namespace; health via
# grpc.health.v1 (e.g. Kubernetes' native gRPC probe on port 50051). The
# manifests in deploy/kubernetes/ listen on a unix socket instead, with
# health alone on a port. No HEALTHCHECK: probing is the orchestrator's job.
# The policy is a mounted file (--policy), e.g. a ConfigMap.
ENV SQUAWK_LISTEN=0.0.0.0:50051
ENTRYPOINT ["squawk", "serve"]
