// The client against tiny in-test grpc-js servers: trace context, timeouts,
// errors and cancellation.
import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";
import {
  Metadata,
  Server,
  ServerCredentials,
  status,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServiceError,
} from "@grpc/grpc-js";
import { context, propagation, ROOT_CONTEXT, trace, TraceFlags, type SpanContext } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  Action,
  ClassifyResponse,
  DecideRetryBatchResponse,
  DecideRetryResponse,
  ErrorCategory,
  Reason,
  SquawkClient,
  SquawkError,
  SquawkInputError,
  type ClassifyRequest,
  type DecideRetryRequest,
} from "../src/index";
import { BadRequest } from "../src/gen/google/rpc/error_details";
import { Status } from "../src/gen/google/rpc/status";
import { PolicyServiceService, type PolicyServiceServer } from "../src/gen/squawk/v1/policy";

type Behaviour = "answer" | "slow" | "invalid" | "detailed" | "garbled" | "denied" | "cancelled";

/** An INVALID_ARGUMENT whose grpc-status-details-bin trailer holds `details`, as grpcio-status writes it. */
function refusal(message: string, details: Uint8Array): Partial<ServiceError> {
  const metadata = new Metadata();
  metadata.set("grpc-status-details-bin", Buffer.from(details));
  return { code: status.INVALID_ARGUMENT, details: message, metadata };
}

/** A google.rpc.Status carrying one BadRequest field violation. */
function badRequest(field: string, description: string): Uint8Array {
  const violation = BadRequest.encode(BadRequest.fromPartial({ fieldViolations: [{ field, description }] }));
  return Status.encode({
    code: status.INVALID_ARGUMENT,
    message: `${field}: ${description}`,
    details: [{ typeUrl: "type.googleapis.com/google.rpc.BadRequest", value: violation.finish() }],
  }).finish();
}

/** A stand-in PolicyService that records the metadata of every call. */
class RecordingServer {
  readonly server = new Server();
  readonly seen: Metadata[] = [];
  behaviour: Behaviour = "answer";
  port = 0;

  private respond<Req, Res>(call: ServerUnaryCall<Req, Res>, callback: sendUnaryData<Res>, answer: Res): void {
    this.seen.push(call.metadata.clone());
    const reply = (): void => {
      if (this.behaviour === "invalid") {
        const error: Partial<ServiceError> = { code: status.INVALID_ARGUMENT, details: "attempt: must be >= 1 (1-based), got 0" };
        callback(error as ServiceError, null);
      } else if (this.behaviour === "detailed") {
        // The message names no field; only the detail does.
        callback(refusal("the request is not acceptable", badRequest("deadline.nanos", "must be < 1e9")) as ServiceError, null);
      } else if (this.behaviour === "garbled") {
        callback(refusal("max_attempts: must be >= 1 when set, got 0", Uint8Array.of(0xff, 0xff, 0xff)) as ServiceError, null);
      } else if (this.behaviour === "cancelled") {
        callback({ code: status.CANCELLED, details: "the daemon gave up on the call" } as ServiceError, null);
      } else if (this.behaviour === "denied") {
        callback({ code: status.PERMISSION_DENIED, details: "not for this caller" } as ServiceError, null);
      } else {
        callback(null, answer);
      }
    };
    if (this.behaviour === "slow") setTimeout(reply, 400);
    else reply();
  }

  async start(): Promise<string> {
    const impl: PolicyServiceServer = {
      classify: (call: ServerUnaryCall<ClassifyRequest, ClassifyResponse>, cb: sendUnaryData<ClassifyResponse>) =>
        this.respond(call, cb, ClassifyResponse.fromPartial({ httpStatus: 418, category: ErrorCategory.ERROR_CATEGORY_INPUT_ERROR })),
      decideRetry: (call: ServerUnaryCall<DecideRetryRequest, DecideRetryResponse>, cb: sendUnaryData<DecideRetryResponse>) =>
        this.respond(
          call,
          cb,
          DecideRetryResponse.fromPartial({
            action: Action.ACTION_RETRY,
            reason: Reason.REASON_TRANSIENT_STATUS,
            delay: { seconds: 0, nanos: 7_000_000 },
            explanation: "from the recording server",
          }),
        ),
      decideRetryBatch: (call, cb) =>
        this.respond(
          call,
          cb,
          DecideRetryBatchResponse.fromPartial({
            results: call.request.requests.map(() => ({
              decision: { action: Action.ACTION_FAIL, reason: Reason.REASON_TERMINAL_STATUS, explanation: "from the recording server" },
            })),
          }),
        ),
      analyzeError: (_call, cb) => cb({ code: status.UNIMPLEMENTED } as ServiceError, null),
      checkDispatch: (_call, cb) => cb({ code: status.UNIMPLEMENTED } as ServiceError, null),
      admit: (_call, cb) => cb({ code: status.UNIMPLEMENTED } as ServiceError, null),
      reportOutcome: (_call, cb) => cb({ code: status.UNIMPLEMENTED } as ServiceError, null),
      getUpstreams: (_call, cb) => cb({ code: status.UNIMPLEMENTED } as ServiceError, null),
      getEvents: (_call, cb) => cb({ code: status.UNIMPLEMENTED } as ServiceError, null),
      explainDecision: (_call, cb) => cb({ code: status.UNIMPLEMENTED } as ServiceError, null),
    };
    this.server.addService(PolicyServiceService, impl);
    this.port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, port) =>
        error ? reject(error) : resolve(port),
      ),
    );
    return `127.0.0.1:${this.port}`;
  }

  stop(): void {
    this.server.forceShutdown();
  }
}

const SPAN: SpanContext = {
  traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
  spanId: "00f067aa0ba902b7",
  traceFlags: TraceFlags.SAMPLED,
};
const TRACEPARENT = `00-${SPAN.traceId}-${SPAN.spanId}-01`;

describe("client against an in-test server", () => {
  const recorder = new RecordingServer();
  let target: string;

  before(async () => {
    target = await recorder.start();
  });
  after(() => recorder.stop());
  afterEach(() => {
    recorder.behaviour = "answer";
  });

  test("a configured propagator puts the given context's traceparent on the call", async () => {
    const client = new SquawkClient(target, { propagator: new W3CTraceContextPropagator(), callTimeoutMs: 2000 });
    try {
      const ctx = trace.setSpanContext(ROOT_CONTEXT, SPAN);
      const decision = await client.decideRetry({ attempt: 1, httpStatus: 503 }, { context: ctx });
      assert.equal(decision.fallback, false);
      assert.equal(decision.explanation, "from the recording server");
      assert.deepEqual(recorder.seen.at(-1)?.get("traceparent"), [TRACEPARENT]);
    } finally {
      client.close();
    }
  });

  test("the global propagator and the active context are used by default", async () => {
    const manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    const client = new SquawkClient(target, { callTimeoutMs: 2000 });
    try {
      const ctx = trace.setSpanContext(context.active(), SPAN);
      const answer = await context.with(ctx, () => client.classify({ errorMessage: "status 418" }));
      assert.equal(answer.httpStatus, 418);
      assert.deepEqual(recorder.seen.at(-1)?.get("traceparent"), [TRACEPARENT]);
      // Outside any span there is nothing to propagate.
      await client.classify({});
      assert.deepEqual(recorder.seen.at(-1)?.get("traceparent"), []);
    } finally {
      client.close();
      propagation.disable();
      context.disable();
    }
  });

  test("without a registered propagator no traceparent is sent (the API is a no-op)", async () => {
    const client = new SquawkClient(target, { callTimeoutMs: 2000 });
    try {
      await client.decideRetry({ attempt: 1 }, { context: trace.setSpanContext(ROOT_CONTEXT, SPAN) });
      assert.deepEqual(recorder.seen.at(-1)?.get("traceparent"), []);
    } finally {
      client.close();
    }
  });

  test("a daemon slower than callTimeoutMs is answered for by the fallback", async () => {
    recorder.behaviour = "slow";
    const client = new SquawkClient(target, { callTimeoutMs: 50 });
    try {
      const started = Date.now();
      const decision = await client.decideRetry({ attempt: 1, httpStatus: 503 });
      const took = Date.now() - started;
      assert.equal(decision.fallback, true);
      assert.equal(decision.action, Action.ACTION_RETRY);
      assert.deepEqual(decision.delay, { seconds: 0, nanos: 542_000_000 });
      assert.equal(client.fallbackCount, 1);
      assert.ok(took < 350, `took ${took} ms`);
    } finally {
      client.close();
    }
  });

  test("a slow daemon's batch is decided item by item by the fallback", async () => {
    recorder.behaviour = "slow";
    const client = new SquawkClient(target, { callTimeoutMs: 50 });
    try {
      const results = await client.decideRetryBatch({ requests: [{ attempt: 1, httpStatus: 503 }, { attempt: 1, httpStatus: 401 }] });
      assert.deepEqual(
        results.map((r) => [r.decision?.fallback, r.decision?.action, r.decision?.reason]),
        [
          [true, Action.ACTION_RETRY, Reason.REASON_TRANSIENT_STATUS],
          [true, Action.ACTION_FAIL, Reason.REASON_TERMINAL_STATUS],
        ],
      );
      assert.equal(client.fallbackCount, 2);
    } finally {
      client.close();
    }
  });

  test("a daemon that answers CANCELLED did not decide: a batch is decided item by item by the fallback", async () => {
    recorder.behaviour = "cancelled";
    const client = new SquawkClient(target, { callTimeoutMs: 2000 });
    try {
      const results = await client.decideRetryBatch({ requests: [{ attempt: 1, httpStatus: 503 }, { attempt: 1, httpStatus: 401 }] });
      assert.deepEqual(
        results.map((r) => [r.decision?.fallback, r.decision?.action, r.decision?.reason]),
        [
          [true, Action.ACTION_RETRY, Reason.REASON_TRANSIENT_STATUS],
          [true, Action.ACTION_FAIL, Reason.REASON_TERMINAL_STATUS],
        ],
      );
      assert.equal(client.fallbackCount, 2);
    } finally {
      client.close();
    }
  });

  test("a batch gets the call timeout once per started 100 requests", async () => {
    // The server answers after 400 ms: 3,000 requests get 30 x 50 ms, enough to wait for
    // it with room for a loaded machine (a single call's 50 ms is not).
    recorder.behaviour = "slow";
    const client = new SquawkClient(target, { callTimeoutMs: 50 });
    try {
      const requests = Array.from({ length: 3000 }, () => ({ attempt: 1, httpStatus: 401 }));
      const results = await client.decideRetryBatch({ requests });
      assert.equal(results.length, 3000);
      assert.ok(results.every((r) => r.decision?.fallback === false && r.decision.explanation === "from the recording server"));
      assert.equal(client.fallbackCount, 0);
    } finally {
      client.close();
    }
  });

  test("with the fallback disabled a slow daemon is an error", async () => {
    recorder.behaviour = "slow";
    const client = new SquawkClient(target, { callTimeoutMs: 50, fallback: false });
    try {
      await assert.rejects(client.decideRetry({ attempt: 1, httpStatus: 503 }), (e: unknown) => {
        return e instanceof SquawkError && e.code === status.DEADLINE_EXCEEDED;
      });
      assert.equal(client.fallbackCount, 0);
    } finally {
      client.close();
    }
  });

  test("INVALID_ARGUMENT becomes SquawkInputError naming the field; other errors are not hidden", async () => {
    const client = new SquawkClient(target, { callTimeoutMs: 2000 });
    try {
      recorder.behaviour = "invalid";
      await assert.rejects(client.decideRetry({ attempt: 0 }), (e: unknown) => e instanceof SquawkInputError && e.field === "attempt");
      recorder.behaviour = "detailed";
      await assert.rejects(client.classify({}), (e: unknown) => {
        assert.ok(e instanceof SquawkInputError);
        assert.equal(e.field, "deadline.nanos", "read from the google.rpc.BadRequest detail");
        assert.equal(e.message, "the request is not acceptable");
        return true;
      });
      recorder.behaviour = "garbled";
      await assert.rejects(
        client.decideRetry({ attempt: 1 }),
        (e: unknown) => e instanceof SquawkInputError && e.field === "max_attempts",
        "a trailer that does not decode leaves the message's prefix",
      );
      // A verdict on the caller surfaces (the runner vectors pin the whole
      // table of statuses, INTERNAL falling back among it).
      recorder.behaviour = "denied";
      await assert.rejects(
        client.decideRetry({ attempt: 1 }),
        (e: unknown) => e instanceof SquawkError && e.code === status.PERMISSION_DENIED,
      );
      assert.equal(client.fallbackCount, 0);
    } finally {
      client.close();
    }
  });

  test("aborting the signal cancels the call at once", async () => {
    recorder.behaviour = "slow";
    const client = new SquawkClient(target, { callTimeoutMs: 5000 });
    try {
      const controller = new AbortController();
      const started = Date.now();
      const call = client.decideRetry({ attempt: 1, httpStatus: 503 }, { signal: controller.signal });
      setTimeout(() => controller.abort(new Error("stop")), 20);
      await assert.rejects(call, /stop/);
      assert.ok(Date.now() - started < 300);
      await assert.rejects(client.classify({}, { signal: AbortSignal.abort(new Error("already")) }), /already/);
      // The default reason, a DOMException, comes back as it is.
      const plain = new AbortController();
      const pending = client.decideRetry({ attempt: 1, httpStatus: 503 }, { signal: plain.signal });
      setTimeout(() => plain.abort(), 10);
      await assert.rejects(pending, (e: unknown) => e instanceof Error && e.name === "AbortError" && e === plain.signal.reason);
      assert.equal(client.fallbackCount, 0);
    } finally {
      client.close();
    }
  });

  test("a closed client rejects", async () => {
    const client = new SquawkClient(target);
    client.close();
    await assert.rejects(client.decideRetry({ attempt: 1 }), /closed/);
  });
});
