// SquawkClient: typed squawk.v1 calls with a per-call deadline, W3C trace
// context on every call, the local fallback for decisions and fail-open
// admissions and reports when the daemon cannot answer.
import { connectivityState, credentials as grpcCredentials, Metadata, status, type ServiceError } from "@grpc/grpc-js";
import { context as otelContext, propagation, type Context, type TextMapPropagator, type TextMapSetter } from "@opentelemetry/api";
import { admissionIdOf, decisionIdOf, leasedAdmission, openAdmission, spacingOf, type LeasedPermit } from "./admission";
import { BATCH_ITEMS_PER_TIMEOUT, batchFromResponse, batchLocally, type BatchResult } from "./batch";
import { durationFromMs, durationToMs } from "./duration";
import { fallbackProfileFromEnv } from "./env";
import { inputErrorFrom, isServiceError, SquawkError, SquawkInputError } from "./errors";
import { fallbackDecide, type FallbackProfile } from "./fallback";
import {
  AdmitRequest,
  AnalyzeErrorRequest,
  BreakerState,
  CheckDispatchRequest,
  ClassifyRequest,
  ExplainDecisionRequest,
  GetEventsRequest,
  GetUpstreamsRequest,
  PolicyServiceClient,
  type AdmitResponse,
  type AnalyzeErrorResponse,
  type CheckDispatchResponse,
  type ClassifyResponse,
  type DecideRetryBatchResponse,
  type DecideRetryRequest,
  type DecideRetryResponse,
  type ExplainDecisionResponse,
  type GetEventsResponse,
  type GetUpstreamsResponse,
  type ReportOutcomeResponse,
  type UpstreamState,
} from "./gen/squawk/v1/policy";
import {
  DEFAULT_CHANNEL_OPTIONS,
  type Admission,
  type AdmitInput,
  type AnalyzeErrorInput,
  type CallOptions,
  type CheckDispatchInput,
  type ClassifyInput,
  type Decision,
  type DecideRetryBatchInput,
  type DecideRetryInput,
  type FallbackEvent,
  type GetEventsInput,
  type GetUpstreamsInput,
  type OutcomeInput,
  type ReportOutcomeInput,
  type SquawkClientOptions,
  type SquawkMethod,
} from "./options";
import { batchRequest, checked, decideRequest, reportRequest } from "./requests";
import { notSentMessage, Throttle, type RpcMethod, type ThrottleVerdict } from "./throttle";
import { unary, type Start } from "./unary";

/**
 * The most pages getUpstreams reads, as `squawk upstreams` does: ten times a
 * full registry (10,000 upstreams by default, 1,000 a page). Names tracked
 * while it lists come on later pages, so a flood of new names, or a server
 * that never stops answering a nextPageToken, would otherwise keep it reading.
 */
export const MAX_UPSTREAM_PAGES = 100;

/** The most outcomes one batched ReportOutcome carries (with `batchOutcomes`). */
export const OUTCOME_BATCH_SIZE = 100;

/** Outcome.age's bound on the wire: a queued outcome older than this is not sent. */
const MAX_OUTCOME_AGE_MS = 60_000;

/** The longest a queued outcome waits before its batch is sent (with `batchOutcomes`); a patient one may wait a lease, 200 ms. */
export const OUTCOME_BATCH_DELAY_MS = 50;

/**
 * The longest a patient outcome waits (a success started on a lease of
 * paced starts): one lease (the pod's 200 ms). Such a lease comes only
 * under a declared or announced rate, where nothing in the pod reads a
 * success sooner (the rate is not
 * learned from it, its headers are read as of their age), so a busy
 * executor reports once a lease, not four times. Any other outcome queued
 * behind it brings the batch back to OUTCOME_BATCH_DELAY_MS.
 */
export const OUTCOME_BATCH_PATIENT_DELAY_MS = 200;

/** The most permits one Admit may ask for (AdmitRequest.permits). */
const MAX_LEASE_PERMITS = 100;

/**
 * The longest a spare permit is kept, whatever lease the answer names: the
 * pod's leases are short, and a spare permit outliving a change of the
 * upstream's state would start a call the pod would now refuse.
 */
const MAX_LEASE_MS = 1000;

/** The most (profile, upstream, capability) keys holding spare permits; past it, spares are not kept. */
const MAX_LEASES = 1000;

/** The key of a lease: an empty profile is "default", as the daemon reads it. */
export function leaseKey(profile: string, upstream: string, capability: string): string {
  return JSON.stringify([profile === "" ? "default" : profile, upstream, capability]);
}

/**
 * Spare permits of one Admit answer: how many are left, from when and until
 * when, and when the next one may start (the client's clock, ms).
 */
interface Lease {
  remaining: number;
  readonly askedAt: number;
  readonly endsAt: number;
  /**
   * When the next spare permit may start: the answer's arrival + its wait
   * + one spacing for the first, one spacing more for each taken since.
   */
  nextStartAt: number;
  /** The time between the spare permits' starts (0: each may start at once). */
  readonly spacingMs: number;
  /** The grant's admission id, which each permit's outcome names. */
  readonly admissionId: string;
}

/** Whether a lease has ended at `now`; a clock that went back ends it too (the wall clock is not monotonic). */
function ended(lease: Lease, now: number): boolean {
  return now >= lease.endsAt || now < lease.askedAt;
}

/** An allowed Admit answer as the lease table reads it (ms; an absent field is the answer's default). */
export interface Grant {
  /** The permits granted, the asking dispatch's included. */
  readonly permits: number;
  /** How long the spare permits stay valid (0 or absent: no lease). */
  readonly leaseMs?: number;
  /** When the asking dispatch starts (its pacer wait). */
  readonly waitMs?: number;
  /** The time between the permits' starts (0 or absent: nothing paces). */
  readonly spacingMs?: number;
  readonly admissionId: string;
}

/**
 * @internal The spare permits by (profile, upstream, capability), on the
 * client's clock: the rules of tests/vectors/leases.json, which every
 * client runs. A grant of more than one permit with a lease keeps
 * permits - 1 spare ones, until the lease ends (at most MAX_LEASE_MS);
 * spare permit i starts no earlier than the answer + wait + i x spacing,
 * each start reserved in the pod's pace. A take gets the next one in order
 * with the wait for its start, or none when that start is not before the
 * step's deadline (the permit stays for the next take). A later lease
 * replaces them; any other grant, or a failure of the upstream
 * (dropUpstream), drops them.
 */
export class Leases {
  private readonly byKey = new Map<string, Lease>();

  constructor(private readonly now: () => number) {}

  /**
   * Use the next spare permit of `key` (its grant's admission id, and the
   * ms to wait for its start), when one is left, its lease has not ended,
   * and its start comes before `deadlineLeftMs` (undefined: no deadline);
   * undefined otherwise: ask Admit.
   */
  take(key: string, deadlineLeftMs: number | undefined): LeasedPermit | undefined {
    const lease = this.byKey.get(key);
    if (lease === undefined) return undefined;
    const now = this.now();
    if (ended(lease, now) || lease.remaining <= 0) {
      this.byKey.delete(key);
      return undefined;
    }
    const waitMs = Math.max(0, lease.nextStartAt - now);
    // A start the step's deadline comes first to: this step asks the pod,
    // and the permit stays for the next one.
    if (deadlineLeftMs !== undefined && waitMs >= deadlineLeftMs) return undefined;
    lease.remaining -= 1;
    lease.nextStartAt += lease.spacingMs;
    if (lease.remaining === 0) this.byKey.delete(key);
    return { admissionId: lease.admissionId, waitMs, spacingMs: lease.spacingMs };
  }

  /**
   * Record an allowed answer for `key`, asked at `askedAt`: a grant of more
   * than one permit with a lease replaces the spare permits (its lease runs
   * from when the client asked, its starts from the answer's arrival, so
   * both err towards the pod's); any other drops them.
   */
  granted(key: string, grant: Grant, askedAt: number): void {
    const leaseMs = Math.min(grant.leaseMs ?? 0, MAX_LEASE_MS);
    const permits = Math.min(grant.permits, MAX_LEASE_PERMITS);
    if (!(permits > 1 && leaseMs > 0)) {
      // A single grant: the pod limits the key now; the spare ones go.
      this.byKey.delete(key);
      return;
    }
    const spacingMs = Math.max(0, grant.spacingMs ?? 0);
    const lease: Lease = {
      remaining: permits - 1,
      askedAt,
      endsAt: askedAt + leaseMs,
      nextStartAt: this.now() + Math.max(0, grant.waitMs ?? 0) + spacingMs,
      spacingMs,
      admissionId: grant.admissionId,
    };
    if (!this.byKey.has(key) && this.byKey.size >= MAX_LEASES) this.sweep();
    if (this.byKey.has(key) || this.byKey.size < MAX_LEASES) this.byKey.set(key, lease);
  }

  /** Forget the spare permits of `key` (a grant not to keep came for it). */
  drop(key: string): void {
    this.byKey.delete(key);
  }

  /** Forget the spare permits of (profile, upstream), of every capability (a dispatch to it failed). */
  dropUpstream(profile: string, upstream: string): void {
    if (this.byKey.size === 0) return;
    const prefix = leaseKey(profile, upstream, "").slice(0, -3);
    for (const key of this.byKey.keys()) if (key.startsWith(prefix)) this.byKey.delete(key);
  }

  /** Forget the ended leases. */
  private sweep(): void {
    const now = this.now();
    for (const [key, lease] of this.byKey) if (ended(lease, now)) this.byKey.delete(key);
  }
}

/** Each GetUpstreams and GetEvents page's, and each ExplainDecision's, deadline when the call names none (the Python client's too). */
const UPSTREAMS_PAGE_TIMEOUT_MS = 1000;

/** An analysis may call a model: it gets seconds, not the 50 ms of a decision. */
const ANALYZE_TIMEOUT_MS = 30_000;

/**
 * Codes that mean "the daemon did not decide": the fallback takes over. The
 * daemon itself answers INVALID_ARGUMENT, INTERNAL and RESOURCE_EXHAUSTED (a
 * call that reached it too close to its deadline); the others come from gRPC
 * or a proxy: unreachable or too slow, CANCELLED by the server or a
 * proxy (under load, or on shutdown; the caller's own abort rejects with
 * `signal.reason` and never falls back), RESOURCE_EXHAUSTED (overload, an
 * answer over the size limit), UNKNOWN (an answer that could not be read),
 * UNIMPLEMENTED (an older daemon, or another server at the address), ABORTED
 * and DATA_LOSS. Left out, so that they surface: INVALID_ARGUMENT (the
 * caller's bad input), NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
 * OUT_OF_RANGE (verdicts on the request), PERMISSION_DENIED and
 * UNAUTHENTICATED (a verdict on the caller, which a fallback would hide for
 * good). The Python and Go clients keep the same table, pinned by the runner
 * vectors.
 */
const FALLBACK_CODES: ReadonlySet<status> = new Set([
  status.CANCELLED,
  status.UNKNOWN,
  status.DEADLINE_EXCEEDED,
  status.RESOURCE_EXHAUSTED,
  status.ABORTED,
  status.INTERNAL,
  status.UNAVAILABLE,
  status.UNIMPLEMENTED,
  status.DATA_LOSS,
]);

/** Each call's RPC method of squawk.v1.PolicyService, whose window throttles it. */
const RPC_METHODS: Readonly<Record<SquawkMethod, RpcMethod>> = Object.freeze({
  classify: "Classify",
  decideRetry: "DecideRetry",
  decideRetryBatch: "DecideRetryBatch",
  analyzeError: "AnalyzeError",
  checkDispatch: "CheckDispatch",
  admit: "Admit",
  reportOutcome: "ReportOutcome",
  getUpstreams: "GetUpstreams",
  getEvents: "GetEvents",
  explainDecision: "ExplainDecision",
});

/**
 * A call the throttle refused, as the daemon's RESOURCE_EXHAUSTED would
 * have ended it: a ServiceError, so that the fallback table applies
 * unchanged (decisions from the fallback, admit and reportOutcome fail
 * open, the other calls reject with it), counted as a fallback as today.
 */
function notSent(method: RpcMethod, verdict: ThrottleVerdict): ServiceError {
  const details = notSentMessage(method, verdict);
  return Object.assign(new Error(`${status.RESOURCE_EXHAUSTED} ${status[status.RESOURCE_EXHAUSTED]}: ${details}`), {
    code: status.RESOURCE_EXHAUSTED,
    details,
    metadata: new Metadata(),
  });
}

const metadataSetter: TextMapSetter<Metadata> = {
  set(carrier, key, value) {
    carrier.set(key, value);
  },
};

/**
 * Where the daemon is when the caller names no target: SQUAWK_ADDRESS (the
 * pod's manifest sets it, as OTel SDKs read OTEL_EXPORTER_OTLP_ENDPOINT),
 * else the daemon's own default listen address. A target given wins; an
 * empty one, or an empty variable, counts as not given.
 */
const ADDRESS_VARIABLE = "SQUAWK_ADDRESS";
const DEFAULT_TARGET = "127.0.0.1:50051";

export class SquawkClient {
  /** The daemon's address the client dials (given, or from SQUAWK_ADDRESS, or the default). */
  readonly target: string;
  /** The fallback's "default" profile; the runner's forced resends wait its backoff. */
  readonly fallbackProfile: FallbackProfile;
  private readonly stub: PolicyServiceClient;
  private readonly callTimeoutMs: number;
  private readonly fallbackEnabled: boolean;
  private readonly propagator: TextMapPropagator | undefined;
  private readonly now: () => number;
  private readonly onFallback: ((event: FallbackEvent) => void) | undefined;
  private fallbacks = 0;
  private closed = false;
  private readonly batchOutcomes: boolean;
  private readonly leasePermits: number;
  /** Spare permits by (profile, upstream, capability). */
  private readonly leases: Leases;
  /**
   * Outcomes queued for the next batched report, each with when it was
   * queued (its age goes with it), and the timer that sends them.
   */
  private queued: { readonly outcome: OutcomeInput; readonly at: number }[] = [];
  private batchTimer: ReturnType<typeof setTimeout> | undefined;
  /** When the queued batch is due (the client's clock; Infinity when empty): the earliest due time of what it holds. */
  private batchDueAt = Number.POSITIVE_INFINITY;
  /** Batched reports on the wire: flush() and close() wait for them. */
  private readonly sending = new Set<Promise<void>>();
  /**
   * Client-side throttling of every call to the daemon (src/throttle.ts),
   * on the monotonic performance.now and Math.random: once 20 calls of a
   * method ended or were refused in the last ten seconds, a call is refused
   * locally, as the daemon's RESOURCE_EXHAUSTED would end it, with a
   * probability that grows while the daemon answers fewer than half of them.
   */
  private readonly throttle = new Throttle();

  /** `target`: a gRPC target; left out (or empty), SQUAWK_ADDRESS, else 127.0.0.1:50051. */
  constructor(target?: string, options: SquawkClientOptions = {}) {
    this.target = target || process.env[ADDRESS_VARIABLE] || DEFAULT_TARGET;
    this.callTimeoutMs = options.callTimeoutMs ?? 50;
    if (!(this.callTimeoutMs > 0)) throw new RangeError(`callTimeoutMs must be > 0, got ${this.callTimeoutMs}`);
    this.fallbackEnabled = options.fallback ?? true;
    this.propagator = options.propagator;
    this.fallbackProfile = Object.freeze({ ...fallbackProfileFromEnv(), ...options.fallbackProfile });
    this.now = options.now ?? Date.now;
    this.leases = new Leases(this.now);
    this.onFallback = options.onFallback;
    this.batchOutcomes = options.batchOutcomes ?? false;
    this.leasePermits = options.leasePermits ?? 1;
    if (!(Number.isInteger(this.leasePermits) && this.leasePermits >= 1 && this.leasePermits <= MAX_LEASE_PERMITS)) {
      throw new RangeError(`leasePermits must be an integer from 1 to ${MAX_LEASE_PERMITS}, got ${options.leasePermits}`);
    }
    this.stub = new PolicyServiceClient(this.target, options.credentials ?? grpcCredentials.createInsecure(), {
      ...DEFAULT_CHANNEL_OPTIONS,
      ...options.channelOptions,
    });
    // grpc-js connects on the first call otherwise, and the handshake alone
    // can outlast that call's 50 ms: the fallback would answer instead of the
    // daemon. This only starts the attempt; a daemon that is down is no error.
    this.stub.getChannel().getConnectivityState(true);
  }

  /**
   * @internal For tests: the channel's state, read without starting a
   * connection, so a test can see that the constructor started one.
   */
  connectivityState(): connectivityState {
    return this.stub.getChannel().getConnectivityState(false);
  }

  /**
   * How many answers the client gave for the daemon: decisions from the
   * local fallback (each batch item counts), and fail-open admits and reports.
   */
  get fallbackCount(): number {
    return this.fallbacks;
  }

  /**
   * Classify an upstream failure. Only the daemon classifies: there is no
   * fallback here (an unreachable daemon is a SquawkError).
   */
  async classify(input: ClassifyInput, options: CallOptions = {}): Promise<ClassifyResponse> {
    const request = checked("classify", ClassifyRequest.fromPartial, input);
    return this.call<ClassifyResponse>("classify", (md, co, cb) => this.stub.classify(request, md, co, cb), options);
  }

  /**
   * Decide what to do after a failed attempt. When the daemon does not
   * decide (it is unreachable, slower than the call timeout, or the call ends
   * with a status that says no decision was made: see FALLBACK_CODES), the
   * local fallback answers (`fallback: true`). A
   * request the policy cannot accept is a SquawkInputError either way.
   */
  async decideRetry(input: DecideRetryInput, options: CallOptions = {}): Promise<Decision> {
    const request = decideRequest(input);
    // A failure of the upstream: its spare permits lapse, the pod decides again.
    if (request.upstream !== "") this.leases.dropUpstream(request.profile, request.upstream);
    try {
      const response = await this.invoke<DecideRetryResponse>(
        "decideRetry",
        (md, co, cb) => this.stub.decideRetry(request, md, co, cb),
        options,
      );
      // Hostile until bounded: kept only in the shape the daemon gives.
      return { ...response, decisionId: decisionIdOf(response.decisionId), fallback: false };
    } catch (error) {
      const cause = this.fallbackCause(error, options);
      if (cause === undefined) throw this.translate("decideRetry", error, options);
      // Invalid input throws here, as the daemon would refuse it.
      const decision = this.decideLocally(request);
      this.onFallback?.({ method: "decideRetry", cause });
      return decision;
    }
  }

  /**
   * Decide many failed attempts in one call; results come in request order,
   * a refused item with its own SquawkInputError. When the daemon cannot
   * answer (as for decideRetry), the fallback decides each item. The call
   * timeout applies once per started 100 requests.
   */
  async decideRetryBatch(input: DecideRetryBatchInput, options: CallOptions = {}): Promise<BatchResult[]> {
    const request = batchRequest(input);
    const n = request.requests.length;
    const timeoutMs = options.timeoutMs ?? this.callTimeoutMs * Math.max(1, Math.ceil(n / BATCH_ITEMS_PER_TIMEOUT));
    try {
      const response = await this.invoke<DecideRetryBatchResponse>(
        "decideRetryBatch",
        (md, co, cb) => this.stub.decideRetryBatch(request, md, co, cb),
        { ...options, timeoutMs },
      );
      return batchFromResponse(response, n);
    } catch (error) {
      const cause = this.fallbackCause(error, options);
      if (cause === undefined) throw this.translate("decideRetryBatch", error, options);
      const results = batchLocally(request.requests, (item) => this.decideLocally(item));
      this.onFallback?.({ method: "decideRetryBatch", cause });
      return results;
    }
  }

  /**
   * Ask the daemon for safe parameter changes after a non-transient 4xx.
   * No fallback. Its default deadline is 30 s, not the call timeout: a
   * model-backed analysis takes seconds.
   */
  async analyzeError(input: AnalyzeErrorInput, options: CallOptions = {}): Promise<AnalyzeErrorResponse> {
    const request = checked("analyzeError", AnalyzeErrorRequest.fromPartial, input);
    return this.call<AnalyzeErrorResponse>(
      "analyzeError",
      (md, co, cb) => this.stub.analyzeError(request, md, co, cb),
      { ...options, timeoutMs: options.timeoutMs ?? ANALYZE_TIMEOUT_MS },
    );
  }

  /**
   * The pre-dispatch guard: may these parameters be sent? No fallback: an
   * unreachable daemon is a SquawkError, never a silent "ok".
   */
  async checkDispatch(input: CheckDispatchInput, options: CallOptions = {}): Promise<CheckDispatchResponse> {
    const request = checked("checkDispatch", CheckDispatchRequest.fromPartial, input);
    return this.call<CheckDispatchResponse>(
      "checkDispatch",
      (md, co, cb) => this.stub.checkDispatch(request, md, co, cb),
      options,
    );
  }

  /**
   * May a call to `upstream` be dispatched now? The pod refuses while its
   * breaker for (profile, upstream) is open or the upstream cools down
   * after a Retry-After; `retryAfter` says when to ask again. Fails open:
   * when the daemon is unreachable or slow (as for decideRetry's fallback)
   * the answer is allowed, with `fallback: true`. A request the daemon
   * refuses (an unknown profile) is a SquawkInputError. Send the step's
   * `deadline` left and estimated `cost` for the pacer: an allowed answer's
   * `wait` is when to start; REASON_UPSTREAM_SATURATED means it cannot start
   * in time. With `leasePermits` (and no `permits` of the caller's), a
   * grant's spare permits answer the next admits of the same (profile,
   * upstream, capability) without a call; such an answer, and the one that
   * brought them, says `permits: 1` and no `lease`. Under a pace a spare
   * permit's answer carries the `wait` for its start (the grant's `spacing`
   * apart), and one that would start no sooner than the `deadline` is left
   * for a later admit: this one asks the daemon.
   */
  async admit(input: AdmitInput, options: CallOptions = {}): Promise<Admission> {
    const request = checked("admit", AdmitRequest.fromPartial, input);
    const pooled = request.upstream !== "" && request.permits <= 1 && this.leasePermits > 1;
    const key = leaseKey(request.profile, request.upstream, request.capability);
    const left = request.deadline === undefined ? undefined : durationToMs(request.deadline);
    const leased = pooled ? this.leases.take(key, left) : undefined;
    if (leased !== undefined) return leasedAdmission(leased);
    if (pooled) request.permits = this.leasePermits;
    const askedAt = this.now();
    try {
      const answer = await this.invoke<AdmitResponse>("admit", (md, co, cb) => this.stub.admit(request, md, co, cb), options);
      const response = {
        ...answer,
        admissionId: admissionIdOf(answer.admissionId),
        spacing: spacingOf(answer),
        // A refusal holds nothing, whatever the answer says.
        holdsSlot: answer.allowed && answer.holdsSlot,
        // Only a refusal has one to explain, kept only in the shape the daemon gives.
        decisionId: answer.allowed ? "" : decisionIdOf(answer.decisionId),
      };
      if (pooled) return { ...this.keepSpares(key, response, askedAt), decisionId: response.decisionId, fallback: false };
      return { ...response, fallback: false };
    } catch (error) {
      this.failOpen("admit", error, options);
      return openAdmission();
    }
  }

  /**
   * Keep the spare permits of a grant (this call uses one): only a closed,
   * non-probe grant of more than one, never more than asked, for at most
   * MAX_LEASE_MS from when the client asked; any other grant drops the
   * key's spare permits (the pod limits it now). Answers the admission of
   * this call, which keeps the grant's wait and spacing.
   */
  private keepSpares(key: string, response: AdmitResponse, askedAt: number): AdmitResponse {
    // A refusal leaves them: it may be this step's deadline the pace cannot
    // meet, and the spare permits' starts are reserved for the next steps.
    if (!response.allowed) return { ...response, permits: 0, lease: undefined };
    if (!response.probe && response.breakerState === BreakerState.BREAKER_STATE_CLOSED) {
      this.leases.granted(
        key,
        {
          permits: Math.min(response.permits, this.leasePermits),
          leaseMs: response.lease === undefined ? 0 : durationToMs(response.lease),
          waitMs: response.wait === undefined ? 0 : durationToMs(response.wait),
          spacingMs: response.spacing === undefined ? 0 : durationToMs(response.spacing),
          admissionId: response.admissionId,
        },
        askedAt,
      );
    } else {
      this.leases.drop(key);
    }
    return { ...response, permits: 1, lease: undefined };
  }

  /**
   * Tell the pod how dispatches ended (1 to 1,000 outcomes), so its breaker
   * and retry budget learn from every executor; answers how many were
   * recorded (those with an upstream). Fails open: when the daemon is
   * unreachable or slow it answers 0. A refused report is a SquawkInputError.
   */
  async reportOutcome(input: ReportOutcomeInput, options: CallOptions = {}): Promise<number> {
    const request = reportRequest(input);
    try {
      const response = await this.invoke<ReportOutcomeResponse>(
        "reportOutcome",
        (md, co, cb) => this.stub.reportOutcome(request, md, co, cb),
        options,
      );
      return response.recorded;
    } catch (error) {
      this.failOpen("reportOutcome", error, options);
      return 0;
    }
  }

  /**
   * The pod's state of every tracked upstream (of `profile`, and named
   * exactly `upstream`, when given), in the order the pod began tracking
   * them; with `includeFleet` each state's `fleet` also holds the fleet's
   * view, where the pod has one (the Redis store). Reads page after page (each of at most `pageSize`, 1,000 when
   * unset, starting after `pageToken` when given), each page with its own
   * deadline (`timeoutMs`, else 1 s or the client's callTimeoutMs if longer), until the daemon answers an empty `nextPageToken`. After 100
   * pages it rejects with an ABORTED SquawkError rather than read on (as
   * botocore's paginator refuses a token that never ends); getUpstreamsPage
   * reads one page. No fallback: only the daemon knows.
   */
  async getUpstreams(input: GetUpstreamsInput = {}, options: CallOptions = {}): Promise<UpstreamState[]> {
    let request = checked("getUpstreams", GetUpstreamsRequest.fromPartial, input);
    const states: UpstreamState[] = [];
    for (let page = 0; page < MAX_UPSTREAM_PAGES; page += 1) {
      const response = await this.upstreamsPage(request, options);
      states.push(...response.upstreams);
      if (response.nextPageToken === "") return states;
      request = { ...request, pageToken: response.nextPageToken };
    }
    throw new SquawkError(
      status.ABORTED,
      `getUpstreams: stopped after ${MAX_UPSTREAM_PAGES} pages; more upstreams are being tracked than one listing can read`,
    );
  }

  /**
   * One page of GetUpstreams as the daemon sends it: pass its
   * `nextPageToken` back as `pageToken` for the next page; it is empty on
   * the last. No fallback.
   */
  async getUpstreamsPage(input: GetUpstreamsInput = {}, options: CallOptions = {}): Promise<GetUpstreamsResponse> {
    return this.upstreamsPage(checked("getUpstreams", GetUpstreamsRequest.fromPartial, input), options);
  }

  /**
   * One page of the pod's event history as the daemon answers it: breaker
   * transitions (the pod's and the fleet's), pace changes and cool-downs
   * begun, each with its `cause`, oldest first. Keep the answer's
   * `nextAfter` and pass it as `after` to go on; `lost` counts the events
   * past `after` the daemon no longer holds (it keeps the latest 4,096).
   * No fallback: only the daemon knows.
   *
   * `after` 0 (the default) starts from the oldest event held; `profile`
   * and `upstream` (an exact name) filter; `pageSize` is 100 when unset, 500
   * at most. An `after` that is negative, or past the latest event this
   * daemon process numbered (read from a daemon since restarted: start
   * again from 0), is a SquawkInputError naming `after`. Each page gets a
   * getUpstreams page's deadline (`timeoutMs`, else 1 s or the client's
   * callTimeoutMs if longer).
   */
  async getEvents(input: GetEventsInput = {}, options: CallOptions = {}): Promise<GetEventsResponse> {
    const request = checked("getEvents", GetEventsRequest.fromPartial, input, "", ["after"]);
    return this.call<GetEventsResponse>(
      "getEvents",
      (md, co, cb) => this.stub.getEvents(request, md, co, cb),
      { ...options, timeoutMs: this.pageTimeoutMs(options) },
    );
  }

  /**
   * Why a step was refused: the decision `decisionId` names (a Decision's
   * or an Admission's `decisionId`: an Admit the pod refused, a decideRetry
   * that answered FAIL on a named upstream), the upstream's state when it
   * was made (`breakerState`, `paceSource`, `rate`) and the upstream's
   * latest events before it (at most 10, oldest first), as `squawk explain
   * ID` shows it. No fallback: only the daemon knows.
   *
   * An id the daemon no longer keeps (it keeps the latest 4,096 refusals,
   * and a restarted daemon none of the last one's) is a SquawkError
   * NOT_FOUND; an empty id, or one over 64 characters, a SquawkInputError
   * naming `decision_id`. The call gets a getEvents page's deadline
   * (`timeoutMs`, else 1 s or the client's callTimeoutMs if longer).
   */
  async explainDecision(decisionId: string, options: CallOptions = {}): Promise<ExplainDecisionResponse> {
    if (typeof decisionId !== "string") {
      throw new SquawkInputError("decision_id", `decision_id: explainDecision needs a string, got ${typeof decisionId}`);
    }
    const request = checked("explainDecision", ExplainDecisionRequest.fromPartial, { decisionId });
    return this.call<ExplainDecisionResponse>(
      "explainDecision",
      (md, co, cb) => this.stub.explainDecision(request, md, co, cb),
      { ...options, timeoutMs: this.pageTimeoutMs(options) },
    );
  }

  /**
   * Queue one outcome for a batched report (see `batchOutcomes`). Answers
   * false, queueing nothing, when the client does not batch: report it with
   * reportOutcome. An outcome that cannot be encoded is a SquawkInputError
   * now. A batch the daemon cannot take fails open (counted as a fallback);
   * one it refuses (an outcome past a bound of ReportOutcome, or of a
   * profile it does not know) is dropped whole, so queue outcomes whose
   * names Admit accepted, as the runner does: a lost report only makes the
   * pod's view a little older. The batch goes when the earliest of its
   * outcomes is due: OUTCOME_BATCH_DELAY_MS after it was queued, or a lease
   * (200 ms) for one queued `patient` (the runner's success started on a
   * lease of paced starts). One queued `urgent` (the runner's success of a
   * call that held a slot of a declared cap on calls in flight, which
   * another caller may be waiting for) sends the batch now, with whatever
   * it holds.
   */
  queueOutcome(
    outcome: OutcomeInput,
    options: { readonly patient?: boolean; readonly urgent?: boolean } = {},
  ): boolean {
    if (!this.batchOutcomes) return false;
    if (this.closed) throw new Error(`SquawkClient for ${this.target} is closed`);
    reportRequest({ outcomes: [outcome] });
    const at = this.now();
    this.queued.push({ outcome, at });
    if (this.queued.length >= OUTCOME_BATCH_SIZE || options.urgent === true) {
      this.sendQueued();
      return true;
    }
    const delayMs = options.patient === true ? OUTCOME_BATCH_PATIENT_DELAY_MS : OUTCOME_BATCH_DELAY_MS;
    if (at + delayMs < this.batchDueAt) {
      // Due sooner than the batch: its timer is set anew.
      this.batchDueAt = at + delayMs;
      clearTimeout(this.batchTimer);
      this.batchTimer = setTimeout(() => this.sendQueued(), delayMs);
    }
    return true;
  }

  /** Send every queued outcome now, and resolve when every batched report has ended (it never rejects). */
  async flush(): Promise<void> {
    this.sendQueued();
    while (this.sending.size > 0) await Promise.all(this.sending);
  }

  /**
   * Close the channel; later calls reject. Queued outcomes are sent first
   * (each batch bounded by the call timeout): the returned promise resolves
   * once they have ended and the channel is closed. Without queued or
   * pending reports the channel closes at once.
   */
  close(): Promise<void> {
    this.closed = true;
    this.sendQueued();
    if (this.sending.size === 0) {
      this.stub.close();
      return Promise.resolve();
    }
    return this.flush().then(() => this.stub.close());
  }

  /** Send the queued outcomes as one report (they are at most OUTCOME_BATCH_SIZE); never rejects. */
  private sendQueued(): void {
    clearTimeout(this.batchTimer);
    this.batchTimer = undefined;
    this.batchDueAt = Number.POSITIVE_INFINITY;
    if (this.queued.length === 0) return;
    // Each goes with its age (Outcome.age), the time since it was queued
    // right after its response: the daemon reads an absolute reset in its
    // headers as of then. One past the wire's bound (a minute; batches go
    // within 200 ms) is not sent: the daemon would refuse the whole batch.
    const now = this.now();
    const outcomes = this.queued
      .map(({ outcome, at }) => ({ outcome, ageMs: Math.max(0, now - at) }))
      .filter(({ ageMs }) => ageMs <= MAX_OUTCOME_AGE_MS)
      .map(({ outcome, ageMs }) => ({ ...outcome, age: durationFromMs(ageMs) }));
    this.queued = [];
    if (outcomes.length === 0) return;
    const request = reportRequest({ outcomes });
    const sent = this.unary<ReportOutcomeResponse>(
      "reportOutcome",
      (md, co, cb) => this.stub.reportOutcome(request, md, co, cb),
      {},
    )
      .then(
        () => undefined,
        (error: unknown) => {
          if (this.fallbackCause(error, {}) === undefined) return;
          this.fallbacks += 1;
          this.onFallback?.({ method: "reportOutcome", cause: error as ServiceError });
        },
      )
      .finally(() => this.sending.delete(sent));
    this.sending.add(sent);
  }

  /** The gRPC error that lets the fallback answer, or undefined when the error stands. */
  private fallbackCause(error: unknown, options: CallOptions): ServiceError | undefined {
    if (!this.fallbackEnabled || options.signal?.aborted) return undefined;
    return isServiceError(error) && FALLBACK_CODES.has(error.code) ? error : undefined;
  }

  /** Returns when `error` lets `method` fail open (counted), else throws it as the client's error. */
  private failOpen(method: "admit" | "reportOutcome", error: unknown, options: CallOptions): void {
    const cause = this.fallbackCause(error, options);
    if (cause === undefined) throw this.translate(method, error, options);
    this.fallbacks += 1;
    this.onFallback?.({ method, cause });
  }

  private decideLocally(request: DecideRetryRequest): Decision {
    const decision: Decision = { ...fallbackDecide(request, this.now(), this.fallbackProfile), decisionId: "", fallback: true };
    this.fallbacks += 1;
    return decision;
  }

  private upstreamsPage(request: GetUpstreamsRequest, options: CallOptions): Promise<GetUpstreamsResponse> {
    return this.call<GetUpstreamsResponse>(
      "getUpstreams",
      (md, co, cb) => this.stub.getUpstreams(request, md, co, cb),
      { ...options, timeoutMs: this.pageTimeoutMs(options) },
    );
  }

  /**
   * A page of 1,000 states or 500 events is an admin read, not a step's
   * decision: it gets the Python client's batch deadline, not the 50 ms a
   * decision gets.
   */
  private pageTimeoutMs(options: CallOptions): number {
    return options.timeoutMs ?? Math.max(this.callTimeoutMs, UPSTREAMS_PAGE_TIMEOUT_MS);
  }

  private async call<Res>(method: SquawkMethod, start: Start<Res>, options: CallOptions): Promise<Res> {
    try {
      return await this.invoke(method, start, options);
    } catch (error) {
      throw this.translate(method, error, options);
    }
  }

  private metadata(ctx: Context | undefined): Metadata {
    const metadata = new Metadata();
    const active = ctx ?? otelContext.active();
    if (this.propagator !== undefined) this.propagator.inject(active, metadata, metadataSetter);
    else propagation.inject(active, metadata, metadataSetter);
    return metadata;
  }

  /** A gRPC error as the client's own error; an abort reason and anything else unchanged. */
  private translate(method: SquawkMethod, error: unknown, options: CallOptions): unknown {
    if (options.signal?.aborted && error === options.signal.reason) return error;
    if (!isServiceError(error)) return error;
    if (error.code === status.INVALID_ARGUMENT) return inputErrorFrom(error);
    return new SquawkError(error.code, `${method}: ${error.details || error.message}`, { cause: error });
  }

  private invoke<Res>(method: SquawkMethod, start: Start<Res>, options: CallOptions): Promise<Res> {
    if (this.closed) return Promise.reject(new Error(`SquawkClient for ${this.target} is closed`));
    return this.unary(method, start, options);
  }

  /**
   * One call, closed or not (a closing client still sends its queued
   * outcomes), unless the throttle refuses it: then it ends at once, unsent,
   * as a RESOURCE_EXHAUSTED from the daemon. An aborted signal rejects
   * first with its reason, and a call the signal aborts in flight is not
   * counted: the caller's cancellation says nothing of the daemon's load.
   */
  private unary<Res>(method: SquawkMethod, start: Start<Res>, options: CallOptions): Promise<Res> {
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    const rpc = RPC_METHODS[method];
    const verdict = this.throttle.allow(rpc, performance.now(), Math.random());
    if (!verdict.send) return Promise.reject(notSent(rpc, verdict));
    return unary(
      start,
      this.metadata(options.context),
      options.timeoutMs ?? this.callTimeoutMs,
      options.signal,
      (code) => this.throttle.ended(rpc, performance.now(), code),
    );
  }
}
