"""An executor step, as a real executor process would run it: open a span,
ask Squawk what to do about a failure, ask for a correction, send one call
the daemon refuses, end the span.

Prints the step span's ids as JSON so the test can find them in Jaeger, and
what the refused call was told (its field and details).
Usage: python executor_trace.py SQUAWK_TARGET  (OTLP set by OTEL_* variables)
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta

from google.protobuf import struct_pb2
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from squawk.v1 import policy_pb2 as pb
from squawk_client import SquawkClient, SquawkInputError


def main(target: str) -> None:
    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("executor")
    request = struct_pb2.Struct()
    request.update({"city_code": "PARIS", "check_in": "2026-04-01"})
    schema = struct_pb2.Struct()
    schema.update(
        {
            "type": "object",
            "properties": {"city_code": {"type": "string", "enum": ["PAR", "LON", "NYC"]}},
        }
    )
    with (
        SquawkClient(target, call_timeout=timedelta(seconds=5)) as squawk,
        tracer.start_as_current_span("step search_hotels") as span,
    ):
        squawk.decide_retry(
            pb.DecideRetryRequest(attempt=1, http_status=503, capability="search_hotels")
        )
        squawk.analyze_error(
            pb.AnalyzeErrorRequest(
                http_status=400,
                error_response="error 400: INVALID CITY CODE: PARIS",
                original_request=request,
                parameter_schema=schema,
                capability_name="search_hotels",
            )
        )
        try:  # a caller's mistake: the daemon refuses it, and its span says why
            squawk.classify(pb.ClassifyRequest(error_message="error 503", profile="no-such"))
        except SquawkInputError as exc:
            refused = {"field": exc.field, "details": exc.details}
        else:
            raise SystemExit("the daemon answered a call naming an unknown profile")
        ctx = span.get_span_context()
    provider.shutdown()  # flushes the executor's span to Jaeger
    ids = {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}
    print(json.dumps({**ids, "refused": refused}))


if __name__ == "__main__":
    main(sys.argv[1])
