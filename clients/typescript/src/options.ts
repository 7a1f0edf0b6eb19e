// What SquawkClient and each of its calls accept.
import type { ChannelCredentials, ChannelOptions, ServiceError } from "@grpc/grpc-js";
import type { Context, TextMapPropagator } from "@opentelemetry/api";
import type { FallbackProfile } from "./fallback";
import type {
  AdmitRequest,
  AdmitResponse,
  AnalyzeErrorRequest,
  CheckDispatchRequest,
  ClassifyRequest,
  DecideRetryRequest,
  DecideRetryResponse,
  DeepPartial,
  GetEventsRequest,
  GetUpstreamsRequest,
  Outcome,
} from "./gen/squawk/v1/policy";

/**
 * A decision, from the daemon (`fallback: false`) or the local fallback
 * (`fallback: true`). `decisionId` is the daemon's id for this refusal (a
 * FAIL on a named upstream, or the runner's FAIL for an Admit the pod
 * refused), to pass to explainDecision or `squawk explain ID`; "" when the
 * daemon kept none (a RETRY or CORRECT, a step without an upstream, the
 * local fallback), and for an id that is not at most 64 characters of
 * printable ASCII.
 */
export type Decision = DecideRetryResponse & { readonly fallback: boolean; readonly decisionId: string };

/** A ClassifyRequest; every field may be left out (proto3 defaults). */
export type ClassifyInput = DeepPartial<ClassifyRequest>;
/** A DecideRetryRequest; every field but `attempt` may be left out. A string body is sent as UTF-8. */
export type DecideRetryInput = Omit<DeepPartial<DecideRetryRequest>, "responseBody"> & {
  responseBody?: Uint8Array | string | undefined;
};
/** A DecideRetryBatchRequest: at most 10,000 requests, answered in order. */
export interface DecideRetryBatchInput {
  readonly requests: readonly DecideRetryInput[];
}
/** An AnalyzeErrorRequest; every field may be left out (proto3 defaults). */
export type AnalyzeErrorInput = DeepPartial<AnalyzeErrorRequest>;
/** A CheckDispatchRequest; every field may be left out (proto3 defaults). */
export type CheckDispatchInput = DeepPartial<CheckDispatchRequest>;

/**
 * The pod's answer before a dispatch, from the daemon (`fallback: false`), or
 * the client's fail-open admission when the daemon could not answer
 * (`fallback: true`: allowed, REASON_ADMITTED, breaker CLOSED).
 * `decisionId` is the daemon's id for this refusal, to pass to
 * explainDecision or `squawk explain ID`; "" when the daemon kept none (an
 * allowed call, a spare permit of a lease, the fail-open admission), and
 * for an id that is not at most 64 characters of printable ASCII.
 */
export type Admission = AdmitResponse & { readonly fallback: boolean; readonly decisionId: string };

/** An AdmitRequest; every field may be left out (an empty upstream is admitted untracked). */
export type AdmitInput = DeepPartial<AdmitRequest>;
/** An Outcome: how one dispatch to an upstream ended. `latency` is a Duration. */
export type OutcomeInput = DeepPartial<Outcome>;
/** A ReportOutcomeRequest: 1 to 1,000 outcomes. */
export interface ReportOutcomeInput {
  readonly outcomes: readonly OutcomeInput[];
}
/** A GetUpstreamsRequest; an empty profile lists every profile's upstreams, an empty upstream every name; includeFleet adds the fleet's view. */
export type GetUpstreamsInput = DeepPartial<GetUpstreamsRequest>;
/** A GetEventsRequest; `after` 0 (unset) starts from the oldest event the pod holds, an empty profile or upstream lists every one's events. */
export type GetEventsInput = DeepPartial<GetEventsRequest>;

export type SquawkMethod =
  | "classify"
  | "decideRetry"
  | "decideRetryBatch"
  | "analyzeError"
  | "checkDispatch"
  | "admit"
  | "reportOutcome"
  | "getUpstreams"
  | "getEvents"
  | "explainDecision";

export interface FallbackEvent {
  /**
   * The call the client answered for: the decision calls from the local
   * fallback, admit and reportOutcome by failing open.
   */
  readonly method: "decideRetry" | "decideRetryBatch" | "admit" | "reportOutcome";
  /** The gRPC error that sent the call to the fallback. */
  readonly cause: ServiceError;
}

export interface SquawkClientOptions {
  /**
   * Deadline for each call, in ms (default 50); a batch gets it once per
   * started 100 requests. A slower daemon is answered for by the fallback.
   * analyzeError is not bounded by it (see CallOptions.timeoutMs).
   */
  readonly callTimeoutMs?: number;
  /**
   * When the daemon is unreachable or slow (default true): answer decisions
   * from the local fallback, and let admit and reportOutcome fail open.
   */
  readonly fallback?: boolean;
  /** Channel credentials (default insecure: the daemon listens on loopback). */
  readonly credentials?: ChannelCredentials;
  /** grpc-js channel options, merged over the defaults (short reconnect backoff). */
  readonly channelOptions?: ChannelOptions;
  /** Propagator for trace context (default: the global @opentelemetry/api propagator). */
  readonly propagator?: TextMapPropagator;
  /**
   * Overrides of the fallback's default-profile numbers (default: the built-in
   * profile with the environment's SQUAWK_STEP_RETRY_* overrides, as the daemon reads them).
   */
  readonly fallbackProfile?: Partial<FallbackProfile>;
  /** Clock in Unix ms, read by the fallback for an HTTP-date Retry-After or a spent quota's absolute reset, and for a lease's end (default Date.now). */
  readonly now?: () => number;
  /** Called each time the client answers for the daemon: a fallback decision (once per batch) or a fail-open. */
  readonly onFallback?: (event: FallbackEvent) => void;
  /**
   * Send the runner's success reports in batches (default false): each is
   * queued and sent with others in one ReportOutcome, at most
   * OUTCOME_BATCH_SIZE (100) at once and OUTCOME_BATCH_DELAY_MS (50 ms)
   * after the first was queued (200 ms for a success started on a lease of
   * paced starts, while nothing else is queued behind it); `flush()` and
   * `close()` send the rest. A busy executor then costs the daemon one
   * report per 100 successes instead of one per success; the pod hears of
   * them up to 50 ms later (a paced lease's, up to 200 ms). A half-open
   * probe's success is always reported at once, and one of a call that held
   * a slot of a declared cap on calls in flight (`holdsSlot`) sends its
   * batch at once.
   */
  readonly batchOutcomes?: boolean;
  /**
   * Permits to ask each Admit for, 1 to 100 (default 1: one per call). Above
   * 1, an answer that grants several (while nothing limits the upstream:
   * breaker closed, no cool-down, no pace) is one admission for this call, and the client keeps
   * the rest for its next admits of the same (profile, upstream,
   * capability), answering them without a call until the answer's `lease`
   * ends (kept at most 1 s), another grant replaces them, or a failure of
   * that upstream is sent to decideRetry. Under a pace spare permit i
   * starts no earlier than the answer's `wait` + i x `spacing`: its
   * admission carries the wait left, which the runner sleeps, and one that
   * would start no sooner than the admit's `deadline` is left for the next.
   * Only what the daemon granted is used, never before its start nor after
   * the lease.
   */
  readonly leasePermits?: number;
}

export interface CallOptions {
  /** Aborting cancels the call; the promise rejects with `signal.reason`. */
  readonly signal?: AbortSignal;
  /**
   * This call's deadline in ms (default: the client's callTimeoutMs; for
   * analyzeError 30,000, since a model-backed analysis takes seconds).
   */
  readonly timeoutMs?: number;
  /** Trace context to propagate (default: the active context). */
  readonly context?: Context;
}

/**
 * Channel defaults: reconnect quickly after the daemon restarts, so the
 * client stops using the fallback within about a second.
 */
export const DEFAULT_CHANNEL_OPTIONS: ChannelOptions = Object.freeze({
  "grpc.initial_reconnect_backoff_ms": 100,
  "grpc.max_reconnect_backoff_ms": 1000,
});
