// runStep: run a step, and after each failure ask the policy what to do.
import { AsyncLocalStorage } from "node:async_hooks";
import { awaitAdmission, type Gate } from "./admission";
import { durationFromMs, durationToMs } from "./duration";
import { SquawkInputError } from "./errors";
import type { FallbackProfile } from "./fallback";
import { Action, Criticality, DecideRetryRequest } from "./gen/squawk/v1/policy";
import { override, tierOf, type ErrorInfo, type Tier } from "./hooks";
import type {
  Admission,
  AdmitInput,
  CallOptions,
  Decision,
  DecideRetryInput,
  OutcomeInput,
  ReportOutcomeInput,
} from "./options";
import { paceHeaders } from "./pacehints";
import { StepError, type HeaderSource } from "./steperror";
import { sleep, untilAborted, type Sleep } from "./wait";

/**
 * What the runner asks: a SquawkClient, or a stand-in in tests. admit and
 * reportOutcome are called only for a step with an upstream.
 */
export interface DecisionSource {
  decideRetry(input: DecideRetryInput, options?: CallOptions): Promise<Decision>;
  admit(input: AdmitInput, options?: CallOptions): Promise<Admission>;
  reportOutcome(input: ReportOutcomeInput, options?: CallOptions): Promise<number>;
  /**
   * Optional: take a success's outcome into a batched report, answering
   * true; false when the source does not batch (the runner then calls
   * reportOutcome and waits for it). SquawkClient's batches with its
   * `batchOutcomes` option. `patient`: the dispatch started on a lease of
   * paced starts, and its report may wait longer (a lease, 200 ms).
   * `urgent`: the dispatch held a slot of the upstream's declared cap on
   * calls in flight, and its report goes now (another caller may be
   * waiting for the slot).
   */
  queueOutcome?(outcome: OutcomeInput, options?: { readonly patient?: boolean; readonly urgent?: boolean }): boolean;
  /** Its default profile: the attempt budget and backoff of a forced resend. */
  readonly fallbackProfile: FallbackProfile;
}

/**
 * The step ended: `decision` says why, `cause` is the step's last error
 * (undefined when the pod refused every dispatch and the step never ran).
 */
export class StepFailedError extends Error {
  override name = "StepFailedError";
  /** The final decision (after the error hook), or the pod's refusal. */
  readonly decision: Decision;
  /** How many times the step was called; 0 when the pod never admitted it. */
  readonly calls: number;

  constructor(decision: Decision, calls: number, cause: unknown) {
    const last = calls === 0 ? "" : ` (last error: ${cause instanceof Error ? cause.message : String(cause)})`;
    super(`step failed after ${calls} call(s): ${decision.reason}: ${decision.explanation}${last}`, { cause });
    this.decision = decision;
    this.calls = calls;
  }
}

/** What the step function is told about its run. */
export interface StepContext {
  /** 1-based attempt number; a corrected resend keeps the number. */
  readonly attempt: number;
  readonly correctionsUsed: number;
  readonly signal: AbortSignal | undefined;
}

export interface RunStepOptions<P, R = unknown> {
  /** Cancels the step: a cancelled step is never retried, and a wait ends at once. */
  readonly signal?: AbortSignal;
  /** Attempts allowed in all, >= 1; unset = the profile's (3, or the pod's SQUAWK_STEP_RETRY_MAX_ATTEMPTS). */
  readonly maxAttempts?: number;
  /** Correction budget, >= 0; unset = the profile's (2). 0 is a budget of none, sent as 0. */
  readonly maxValidationRetries?: number;
  /** The step's time budget in ms from the start of runStep; unset = no deadline. */
  readonly deadlineMs?: number;
  readonly hitlApproved?: boolean;
  readonly delegatedOrchestrator?: boolean;
  readonly capability?: string;
  /**
   * The upstream the step calls. When set, the pod admits each dispatch
   * first (a refusal waits its retry_after, or ends the step past the
   * deadline or after `maxAttempts` refusals in a row; an admission's paced
   * `wait`, or a leased permit's wait for its start, is slept before the
   * dispatch, or ends the step when it passes the deadline; a
   * REASON_UPSTREAM_SATURATED refusal ends it at once; a full cap's
   * REASON_IN_FLIGHT_CAP is waited out within the deadline, not counted) and hears of each
   * success; unset, neither happens.
   */
  readonly upstream?: string;
  readonly profile?: string;
  /**
   * The step's estimated cost in the upstream's token units (an LLM call's
   * prompt plus expected completion tokens), for an upstream with a token
   * rate limit: sent with each Admit and reported with the success. Finite,
   * 0 to 1e9; unset or 0 = unknown. Used only with `upstream`.
   */
  readonly cost?: number;
  /**
   * How much the step matters when the upstream's pace cannot serve every
   * call: sent with each Admit, where the lower levels are given shorter
   * waits, so shed first. Unset (or CRITICALITY_UNSPECIFIED): the
   * criticality of the step this one runs inside (see `criticality()`),
   * else CRITICAL. The step function runs with it, so the steps it runs
   * inherit it.
   */
  readonly criticality?: Criticality;
  /**
   * Whose step this is (a tenant, an executor, a workflow), for fairness
   * while the upstream's pace cannot serve every call: sent with each
   * Admit, where a key asking less than its share keeps all it asks and
   * the keys asking more share the rest by `fairnessWeight` (max-min
   * fairness). Unset or "": none (the calls without one share the empty
   * key). At most 256 characters. Nested steps do not inherit it. Used
   * only with `upstream`.
   */
  readonly fairnessKey?: string;
  /**
   * The weight of `fairnessKey` in that share, sent with each Admit.
   * Finite, 0 to 100; unset or 0 = 1. Nested steps do not inherit it. Used
   * only with `upstream`.
   */
  readonly fairnessWeight?: number;
  /**
   * The real cost of a successful call, read from its result, reported
   * instead of `cost`. An answer that is not a finite number from 0 to 1e9
   * (or a hook that throws) reports `cost` instead: the step's result stands.
   */
  readonly costOf?: (result: R) => number;
  /**
   * The response headers of a successful call, read from its result (a
   * plain object or a fetch `Headers`), e.g. `(response) => response.headers`:
   * its rate-limit headers (names holding "ratelimit" or "rate-limit", in
   * any case) are reported with the success, so the pod's pacer reads the
   * upstream's quota before the upstream throttles. At most 64 are kept,
   * of the first 1,024 entries; a name over 256 or a value over 8,192
   * characters, a non-string or a lone surrogate is left out. A hook that
   * throws reports none: the step's result stands. Used only with `upstream`.
   */
  readonly headersOf?: (result: R) => HeaderSource;
  /**
   * Correction hook, called on CORRECT with the failed parameters, the
   * step's error and the decision; its answer is sent next. A correction
   * consumes no attempt; it counts against the correction budget. Its
   * presence tells the policy a correction is available.
   */
  readonly correct?: (params: P, error: unknown, decision: Decision) => P | Promise<P>;
  /** Error hook: the final say after each decision (see Tier). */
  readonly onError?: (info: ErrorInfo) => Tier | undefined | Promise<Tier | undefined>;
  /** The wait between attempts and after a refused admission (a seam for tests); default: an abortable timer. */
  readonly sleep?: Sleep;
  /** Clock in ms for the deadline and a success's reported latency (default Date.now). */
  readonly now?: () => number;
}

const KNOWN_CRITICALITIES: ReadonlySet<unknown> = new Set(
  Object.values(Criticality).filter((level) => level !== Criticality.UNRECOGNIZED),
);

/** Budgets the wire cannot carry, refused before the step runs; named as on the wire (squawkFetch checks its own with it). */
export function validate<P, R>(options: RunStepOptions<P, R>): void {
  const { maxAttempts, maxValidationRetries, deadlineMs, cost } = options;
  const int32 = (n: number): boolean => Number.isInteger(n) && n <= 2 ** 31 - 1;
  if (maxAttempts !== undefined && !(int32(maxAttempts) && maxAttempts >= 1)) {
    throw new SquawkInputError("max_attempts", `max_attempts: maxAttempts must be an integer >= 1 when set, got ${maxAttempts}`);
  }
  if (maxValidationRetries !== undefined && !(int32(maxValidationRetries) && maxValidationRetries >= 0)) {
    throw new SquawkInputError(
      "max_validation_retries",
      `max_validation_retries: maxValidationRetries must be an integer >= 0 when set, got ${maxValidationRetries}`,
    );
  }
  if (deadlineMs !== undefined && !(Number.isFinite(deadlineMs) && deadlineMs >= 0)) {
    throw new SquawkInputError("deadline", `deadline: deadlineMs must be a finite number >= 0 when set, got ${deadlineMs}`);
  }
  if (cost !== undefined && !validCost(cost)) {
    throw new SquawkInputError("cost", `cost: must be a finite number from 0 to ${MAX_COST} when set, got ${cost}`);
  }
  const { criticality: level } = options;
  // The daemon refuses a level it does not know; refused here, before the step runs.
  if (level !== undefined && !KNOWN_CRITICALITIES.has(level)) {
    throw new SquawkInputError("criticality", `criticality: must be one of Criticality's values when set, got ${String(level)}`);
  }
  const { fairnessKey, fairnessWeight } = options;
  if (fairnessKey !== undefined && !validFairnessKey(fairnessKey)) {
    throw new SquawkInputError(
      "fairness_key",
      `fairness_key: must be a string of at most ${MAX_FAIRNESS_KEY_CHARS} characters, without a lone surrogate, when set, got ${describe(fairnessKey)}`,
    );
  }
  if (fairnessWeight !== undefined && !validFairnessWeight(fairnessWeight)) {
    throw new SquawkInputError(
      "fairness_weight",
      `fairness_weight: must be a finite number from 0 to ${MAX_FAIRNESS_WEIGHT} when set, got ${String(fairnessWeight)}`,
    );
  }
  for (const field of ["capability", "upstream", "profile"] as const) {
    const value: unknown = options[field];
    if (value !== undefined && typeof value !== "string") {
      throw new SquawkInputError(field, `${field}: must be a string when set, got ${typeof value}`);
    }
  }
}

/**
 * The criticality of the step running now, in whose store the runner runs
 * each step function: an async context, so it follows the step's awaits,
 * timers and promises, and the steps they run, and never leaks to a
 * concurrent step.
 */
const runningCriticality = new AsyncLocalStorage<Criticality>();

/**
 * The criticality of the step running now: its `criticality` option, or the
 * one it inherited from the step it runs inside; undefined outside any step
 * that named one.
 */
export function criticality(): Criticality | undefined {
  return runningCriticality.getStore();
}

/**
 * The header that carries a step's criticality to the next hop:
 * `squawk-criticality: SHEDDABLE`, the level's name without its
 * `CRITICALITY_` prefix. squawkFetch sends it while a level is in force.
 */
export const CRITICALITY_HEADER = "squawk-criticality";

/** The levels the header names, by their upper-case names without the prefix. */
const HEADER_LEVELS: ReadonlyMap<string, Criticality> = new Map(
  [
    Criticality.CRITICALITY_CRITICAL_PLUS,
    Criticality.CRITICALITY_CRITICAL,
    Criticality.CRITICALITY_SHEDDABLE_PLUS,
    Criticality.CRITICALITY_SHEDDABLE,
  ].map((level) => [level.slice("CRITICALITY_".length), level]),
);

/** The header's value for a level in force (`SHEDDABLE`), or undefined for none (unspecified, unrecognized). */
export function criticalityHeaderValue(level: Criticality | undefined): string | undefined {
  if (level === undefined) return undefined;
  const name = level.startsWith("CRITICALITY_") ? level.slice("CRITICALITY_".length) : "";
  return HEADER_LEVELS.get(name) === level ? name : undefined;
}

/** ASCII letters upper-cased, nothing else (so no other letter folds into a level's name). */
function asciiUpper(text: string): string {
  return text.replace(/[a-z]/g, (c) => c.toUpperCase());
}

/**
 * The criticality a request's `squawk-criticality` header names, for a
 * service that runs steps for incoming requests to pass as runStep's
 * `criticality` option, so the caller's level carries on to the next hop.
 *
 * Takes a WHATWG `Headers` (where a repeated header arrives joined by ", ")
 * or a record of Node's `IncomingHttpHeaders` kind (its name in any case, a
 * value a string or an array of them). The value is one of CRITICAL_PLUS,
 * CRITICAL, SHEDDABLE_PLUS, SHEDDABLE in any case, spaces and tabs trimmed;
 * absent, empty, unknown (UNSPECIFIED and the enum's full `CRITICALITY_`
 * names too) or repeated with different levels is undefined, so the step
 * keeps its own default: a malformed header never means more than none.
 */
export function criticalityFromHeaders(
  headers: Headers | Readonly<Record<string, string | readonly string[] | undefined>>,
): Criticality | undefined {
  const values: string[] = [];
  if (typeof Headers !== "undefined" && headers instanceof Headers) {
    const joined = headers.get(CRITICALITY_HEADER);
    if (joined !== null) values.push(joined);
  } else {
    for (const [name, value] of Object.entries(headers)) {
      if (name.toLowerCase() !== CRITICALITY_HEADER || value === undefined) continue;
      if (typeof value === "string") values.push(value);
      else values.push(...value);
    }
  }
  let found: Criticality | undefined;
  for (const value of values) {
    // A repeated header may arrive joined by commas: each part is one value.
    for (const part of String(value).split(",")) {
      const level = HEADER_LEVELS.get(asciiUpper(part.replace(/^[ \t]+|[ \t]+$/g, "")));
      if (level === undefined || (found !== undefined && found !== level)) return undefined;
      found = level;
    }
  }
  return found;
}

/** The largest cost Admit and ReportOutcome accept (AdmitRequest.cost, Outcome.cost). */
const MAX_COST = 1e9;

function validCost(cost: unknown): cost is number {
  return typeof cost === "number" && Number.isFinite(cost) && cost >= 0 && cost <= MAX_COST;
}

/** The longest fairness key Admit accepts, in characters (code points, as the daemon counts them). */
const MAX_FAIRNESS_KEY_CHARS = 256;
/** The largest fairness weight Admit accepts (AdmitRequest.fairness_weight). */
const MAX_FAIRNESS_WEIGHT = 100;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * A fairness key the wire carries as given: a string of at most 256 code
 * points, without a lone surrogate (which UTF-8 would turn into another
 * key). Whether it is printable is the daemon's to say.
 */
function validFairnessKey(key: unknown): key is string {
  if (typeof key !== "string") return false;
  if (key.length > 2 * MAX_FAIRNESS_KEY_CHARS || LONE_SURROGATE.test(key)) return false;
  return key.length <= MAX_FAIRNESS_KEY_CHARS || [...key].length <= MAX_FAIRNESS_KEY_CHARS;
}

function validFairnessWeight(weight: unknown): weight is number {
  return typeof weight === "number" && Number.isFinite(weight) && weight >= 0 && weight <= MAX_FAIRNESS_WEIGHT;
}

/** A refused value, briefly: a string's length, else its type or value. */
function describe(value: unknown): string {
  return typeof value === "string" ? `${[...value].length} characters` : typeof value;
}

/** The cost to report for a success: the hook's reading of the result when it gives a valid one, else the estimate. */
function realCost<R>(costOf: ((result: R) => number) | undefined, result: R, estimated: number): number {
  if (costOf === undefined) return estimated;
  try {
    const cost = costOf(result);
    return validCost(cost) ? cost : estimated;
  } catch {
    return estimated;
  }
}

/** What a failure tells the policy: a StepError's fields, or a transport failure for anything else. */
function failureFields(error: unknown, maxBodyBytes: number): Partial<DecideRetryRequest> {
  if (!(error instanceof StepError)) return { httpStatus: 0, transportFailure: true };
  const body = typeof error.body === "string" ? new TextEncoder().encode(error.body) : error.body;
  return {
    httpStatus: error.httpStatus,
    transportFailure: error.transportFailure,
    // The policy reads a body's head; a longer one would be refused whole.
    responseBody: body?.subarray(0, maxBodyBytes),
    headers: { ...error.headers },
  };
}

/** The admission of a step without an upstream (never reported). */
const NOT_GATED = { probe: false, admissionId: "", patient: false, urgent: false } as const;

type Settled<R> = { readonly ok: true; readonly value: R } | { readonly ok: false; readonly error: unknown };

async function settle<R>(call: () => Promise<R>): Promise<Settled<R>> {
  try {
    return { ok: true, value: await call() };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * Tell the pod a dispatch to the upstream succeeded: queued into the
 * source's batch when it batches, except a half-open probe's (the breaker
 * waits for the probes' results), else reported now. Its errors are
 * ignored: the step's result stands whatever the report does. A success
 * started on a lease of paced starts is queued patient, one holding a
 * slot of a declared cap urgent. No signal
 * either: the report is bounded by the call timeout, and a success should
 * be counted even when the caller aborts right after it.
 */
async function reportSuccess(
  client: DecisionSource,
  names: { upstream: string; capability: string; profile: string },
  latencyMs: number,
  cost: number,
  estimatedCost: number,
  headers: Record<string, string>,
  admitted: { readonly probe: boolean; readonly admissionId: string; readonly patient: boolean; readonly urgent: boolean },
): Promise<void> {
  const latency = durationFromMs(Math.max(0, latencyMs));
  // The estimate Admit was charged goes too, so that the pace charges the
  // difference; the admission, so that it counts for the concurrency limit.
  const { probe, admissionId, patient, urgent } = admitted;
  const outcome: OutcomeInput = { ...names, success: true, latency, cost, estimatedCost, headers, admissionId };
  try {
    if (!probe && client.queueOutcome?.(outcome, { patient, urgent }) === true) return;
    await client.reportOutcome({ outcomes: [outcome] });
  } catch {
    // Fail open: a lost report only makes the pod's view of the upstream a little older.
  }
}

/**
 * Call `step(params)` until it succeeds or the policy ends the step.
 *
 * After a failure the runner asks `client.decideRetry` (the daemon or its
 * local fallback), lets `options.onError` have the final say, then: RETRY
 * waits the delay (the signal cuts the wait at once) and resends the same
 * parameters; CORRECT asks `options.correct` for new parameters and sends
 * them without consuming an attempt; FAIL rejects with a StepFailedError.
 * A step that fails after its signal aborted is decided as cancelled (never
 * retried); an abort while waiting or deciding rejects with `signal.reason`.
 * Options out of range are a SquawkInputError before the step runs.
 *
 * With `options.upstream` set, each dispatch (the first, and every resend)
 * waits for the pod's admission first (Admit carries the deadline left,
 * `options.cost`, the step's criticality and its fairness key and
 * weight), then the pacer's wait, and
 * each success is reported with the step's latency, cost and rate-limit headers (see RunStepOptions:
 * upstream, costOf, headersOf). A saturated
 * upstream, or a paced start past the deadline, ends the step at once with
 * REASON_UPSTREAM_SATURATED.
 */
export async function runStep<P, R>(
  client: DecisionSource,
  params: P,
  step: (params: P, context: StepContext) => Promise<R>,
  options: RunStepOptions<P, R> = {},
): Promise<R> {
  validate(options);
  const { signal, correct, onError } = options;
  const wait = options.sleep ?? sleep;
  const now = options.now ?? Date.now;
  const profile = client.fallbackProfile;
  const budget = options.maxAttempts ?? profile.maxAttempts;
  const startedAt = now();
  const deadlineLeftMs = (): number | undefined =>
    options.deadlineMs === undefined ? undefined : Math.max(0, startedAt + options.deadlineMs - now());
  const upstream = options.upstream ?? "";
  const names = { upstream, capability: options.capability ?? "", profile: options.profile ?? "" };
  const cost = options.cost ?? 0;
  const named = options.criticality === Criticality.CRITICALITY_UNSPECIFIED ? undefined : options.criticality;
  const gate: Gate | undefined =
    upstream === ""
      ? undefined
      : {
          ...names,
          cost,
          criticality: named ?? criticality(),
          // The step's own: a nested step names its own or none.
          fairnessKey: options.fairnessKey ?? "",
          fairnessWeight: options.fairnessWeight ?? 0,
          admit: (input, o) => client.admit(input, o),
          budget,
          deadlineLeftMs,
          sleep: wait,
          signal,
        };
  let attempt = 1;
  let correctionsUsed = 0;
  let error: unknown;

  for (let calls = 1; ; calls++) {
    if (signal?.aborted) throw signal.reason;
    const admitted = gate === undefined ? undefined : await awaitAdmission(gate);
    if (admitted?.refusal !== undefined) throw new StepFailedError(admitted.refusal, calls - 1, error);
    const dispatchedAt = now();
    const call = (): Promise<R> => step(params, { attempt, correctionsUsed, signal });
    // Unnamed, the level is the caller's store, already in effect here.
    const outcome = await settle(() => (named === undefined ? call() : runningCriticality.run(named, call)));
    if (outcome.ok) {
      if (gate !== undefined) {
        const real = realCost(options.costOf, outcome.value, cost);
        const headers = paceHeaders(options.headersOf, outcome.value);
        await reportSuccess(client, names, now() - dispatchedAt, real, cost, headers, admitted ?? NOT_GATED);
      }
      return outcome.value;
    }
    error = outcome.error;

    const cancelled = signal?.aborted ?? false;
    const left = deadlineLeftMs();
    const request = DecideRetryRequest.fromPartial({
      ...failureFields(error, profile.maxBodyBytes),
      attempt,
      maxAttempts: options.maxAttempts,
      validationRetriesUsed: correctionsUsed,
      maxValidationRetries: options.maxValidationRetries,
      correctionAvailable: correct !== undefined,
      hitlApproved: options.hitlApproved ?? false,
      delegatedOrchestrator: options.delegatedOrchestrator ?? false,
      cancelled,
      deadline: left === undefined ? undefined : durationFromMs(left),
      ...names,
      // The failed dispatch's admission: its slot of the concurrency limit is freed only so.
      admissionId: admitted?.admissionId ?? "",
    });
    // Once cancelled, the decision call itself must not be cut short.
    let decision = await client.decideRetry(request, cancelled ? {} : { signal });
    if (onError !== undefined) {
      const info: ErrorInfo = { attempt, correctionsUsed, error, request, decision };
      decision = override(decision, tierOf(await onError(info)), attempt, budget, profile.backoff);
    }

    if (cancelled || decision.action === Action.ACTION_FAIL) throw new StepFailedError(decision, calls, error);
    if (decision.action === Action.ACTION_RETRY) {
      const delayMs = decision.delay === undefined ? 0 : durationToMs(decision.delay);
      if (delayMs > 0) await untilAborted(wait(delayMs, signal), signal);
      attempt += 1;
      continue;
    }
    if (decision.action === Action.ACTION_CORRECT && correct !== undefined) {
      params = await untilAborted(Promise.resolve(correct(params, error, decision)), signal);
      correctionsUsed += 1;
      continue;
    }
    // CORRECT without a hook, or an action this client does not know.
    throw new StepFailedError(decision, calls, error);
  }
}
