# The daemon image for a pod sidecar. Not built in CI (no container engine
# there); `make test` covers everything this image runs.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY protos protos
COPY sidecar sidecar
COPY clients/python clients/python
RUN pip install --no-cache-dir grpcio-tools==1.85.1 mypy-protobuf \
 && mkdir -p sidecar/proto build/gen \
 && python -m grpc_tools.protoc -Iprotos --python_out=build/gen --grpc_python_out=build/gen protos/squawk/v1/*.proto \
 && cp build/gen/squawk/v1/* sidecar/proto/ \
 && sed -i 's/^from squawk\.v1 import/from . import/' sidecar/proto/*.py \
 && touch sidecar/proto/__init__.py \
 && pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
EXPOSE 50051
# Listen on all interfaces inside the pod's network namespace; health via
# grpc.health.v1 (e.g. Kubernetes' native gRPC probe on port 50051).
ENV SQUAWK_LISTEN=0.0.0.0:50051
ENTRYPOINT ["squawk", "serve"]
