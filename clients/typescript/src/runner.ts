// runStep: run a step, and after each failure ask the policy what to do.
import { backoffDelayMs } from "./backoff";
import type { CallOptions, Decision, DecideRetryInput } from "./client";
import { durationFromMs, durationToMs } from "./duration";
import { Action, reasonToJSON } from "./gen/squawk/v1/policy";

/** Anything that decides: a SquawkClient, or a stand-in in tests. */
export interface DecisionSource {
  decideRetry(input: DecideRetryInput, options?: CallOptions): Promise<Decision>;
}

/** Headers as a plain object, or anything with forEach (the Fetch API's Headers). */
export type HeaderSource =
  | Readonly<Record<string, string>>
  | { forEach(callback: (value: string, key: string) => void): void };

export interface StepErrorInit {
  /** The component's HTTP status; 0 = no response (transport failure) or unknown. */
  readonly httpStatus?: number;
  /** True when no HTTP response arrived (connect, reset, DNS, timeout). */
  readonly transportFailure?: boolean;
  /** The component's raw response body; read for its error envelope. */
  readonly body?: Uint8Array | string;
  readonly headers?: HeaderSource;
  readonly cause?: unknown;
}

/** The minimum of a Fetch API Response that StepError.fromResponse reads. */
export interface ResponseLike {
  readonly status: number;
  readonly statusText?: string;
  readonly headers: { forEach(callback: (value: string, key: string) => void): void };
  arrayBuffer(): Promise<ArrayBuffer>;
}

function headerRecord(source: HeaderSource | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (source === undefined) return out;
  if (typeof source.forEach === "function") {
    (source as { forEach(callback: (value: string, key: string) => void): void }).forEach((value, key) => {
      out[key] = value;
    });
    return out;
  }
  for (const [key, value] of Object.entries(source as Readonly<Record<string, string>>)) out[key] = value;
  return out;
}

/**
 * A failed call to a component, as a step reports it. Any other thrown
 * error counts as a transport failure.
 */
export class StepError extends Error {
  override name = "StepError";
  readonly httpStatus: number;
  readonly transportFailure: boolean;
  readonly body: Uint8Array | string | undefined;
  readonly headers: Readonly<Record<string, string>>;

  constructor(message: string, init: StepErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.httpStatus = init.httpStatus ?? 0;
    this.transportFailure = init.transportFailure ?? false;
    this.body = init.body;
    this.headers = Object.freeze(headerRecord(init.headers));
  }

  /** A StepError from a non-2xx Fetch API response (reads its body). */
  static async fromResponse(response: ResponseLike, message?: string): Promise<StepError> {
    const body = new Uint8Array(await response.arrayBuffer());
    const text = message ?? `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`;
    return new StepError(text, { httpStatus: response.status, body, headers: response.headers });
  }
}

/** The step ended: `decision` says why, `cause` is the step's last error. */
export class StepFailedError extends Error {
  override name = "StepFailedError";
  readonly decision: Decision;
  /** Attempts made (corrections not counted). */
  readonly attempts: number;
  readonly validationRetriesUsed: number;

  constructor(cause: unknown, decision: Decision, attempts: number, validationRetriesUsed: number) {
    const last = cause instanceof Error ? cause.message : String(cause);
    super(
      `step failed after ${attempts} attempt(s): ${reasonToJSON(decision.reason)}: ${decision.explanation} ` +
        `(last error: ${last})`,
      { cause },
    );
    this.decision = decision;
    this.attempts = attempts;
    this.validationRetriesUsed = validationRetriesUsed;
  }
}

/** What the step function is told about its run. */
export interface StepContext {
  /** 1-based attempt number; a corrected resend keeps the number. */
  readonly attempt: number;
  readonly validationRetriesUsed: number;
  readonly signal: AbortSignal | undefined;
}

/** What the hooks are told about a failure. */
export interface StepFailureInfo<P> {
  readonly error: unknown;
  readonly decision: Decision;
  readonly attempt: number;
  readonly validationRetriesUsed: number;
  readonly params: P;
}

/** onError's verdict: "retry" resends, "fail" ends the step, undefined follows the decision. */
export type ErrorVerdict = "retry" | "fail" | undefined;

export type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>;

export interface RunStepOptions<P> {
  /** The step's parameters; a correction replaces them. */
  readonly params: P;
  /** Cancels the step: a cancelled step is never retried, and a wait ends at once. */
  readonly signal?: AbortSignal;
  /** Attempts allowed in all; unset = the profile's (default 3). */
  readonly maxAttempts?: number;
  /** Correction budget; unset = the profile's (default 2). */
  readonly maxValidationRetries?: number;
  /** The step's time budget in ms from the start of runStep; unset = no deadline. */
  readonly deadlineMs?: number;
  readonly hitlApproved?: boolean;
  readonly delegatedOrchestrator?: boolean;
  readonly capability?: string;
  readonly upstream?: string;
  readonly profile?: string;
  /**
   * Correction hook, asked on CORRECT: return corrected parameters, or
   * undefined when it has none (the step then fails). Its presence tells
   * the policy that corrections are available. Corrections do not consume
   * an attempt.
   */
  readonly correct?: (info: StepFailureInfo<P>) => P | undefined | Promise<P | undefined>;
  /**
   * The final say after each decision: "retry" resends the same parameters
   * (after the decision's delay when it is RETRY, else after the default
   * backoff), "fail" ends the step, undefined follows the decision. A
   * cancelled step is never retried, whatever this returns.
   */
  readonly onError?: (info: StepFailureInfo<P>) => ErrorVerdict | Promise<ErrorVerdict>;
  /** The wait between attempts (a seam for tests); default: an abortable timer. */
  readonly sleep?: Sleep;
  /** Clock in ms for the deadline (default Date.now). */
  readonly now?: () => number;
}

/** An abortable timer that rejects with `signal.reason`. */
export const sleep: Sleep = (ms, signal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/** `promise`, or `signal.reason` as soon as the signal aborts, whichever is first. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

function failureFields(error: unknown): Pick<DecideRetryInput, "httpStatus" | "transportFailure" | "responseBody" | "headers"> {
  if (error instanceof StepError) {
    return {
      httpStatus: error.httpStatus,
      transportFailure: error.transportFailure,
      responseBody: error.body,
      headers: { ...error.headers },
    };
  }
  return { httpStatus: 0, transportFailure: true };
}

/**
 * Run `fn` until it succeeds or the policy ends the step.
 *
 * After a failure the runner asks `client.decideRetry`: RETRY waits the
 * delay (the signal cuts the wait at once) and resends the same parameters;
 * CORRECT asks `options.correct` for new parameters and resends them
 * without consuming an attempt; FAIL rejects with a StepFailedError holding
 * the decision and the last error. A step that fails after its signal
 * aborted is decided as cancelled (never retried); an abort while waiting
 * or deciding rejects with `signal.reason`.
 */
export async function runStep<P, R>(
  client: DecisionSource,
  fn: (params: P, context: StepContext) => Promise<R>,
  options: RunStepOptions<P>,
): Promise<R> {
  const { signal } = options;
  const wait = options.sleep ?? sleep;
  const now = options.now ?? Date.now;
  const startedAt = now();
  let params = options.params;
  let attempt = 1;
  let validationRetriesUsed = 0;

  for (;;) {
    if (signal?.aborted) throw signal.reason;
    let error: unknown;
    try {
      return await fn(params, { attempt, validationRetriesUsed, signal });
    } catch (caught) {
      error = caught;
    }

    const cancelled = signal?.aborted ?? false;
    const input: DecideRetryInput = {
      ...failureFields(error),
      attempt,
      maxAttempts: options.maxAttempts,
      validationRetriesUsed,
      maxValidationRetries: options.maxValidationRetries,
      correctionAvailable: options.correct !== undefined,
      hitlApproved: options.hitlApproved ?? false,
      delegatedOrchestrator: options.delegatedOrchestrator ?? false,
      cancelled,
      deadline:
        options.deadlineMs === undefined ? undefined : durationFromMs(Math.max(0, startedAt + options.deadlineMs - now())),
      capability: options.capability ?? "",
      upstream: options.upstream ?? "",
      profile: options.profile ?? "",
    };
    // Once cancelled, the decision call itself must not be cut short.
    const decision = await client.decideRetry(input, cancelled ? {} : { signal });
    const info: StepFailureInfo<P> = { error, decision, attempt, validationRetriesUsed, params };
    const verdict = options.onError === undefined ? undefined : await options.onError(info);
    const fail = (): StepFailedError => new StepFailedError(error, decision, attempt, validationRetriesUsed);

    if (cancelled || verdict === "fail") throw fail();
    if (verdict === "retry" || decision.action === Action.ACTION_RETRY) {
      const delayMs =
        decision.action === Action.ACTION_RETRY && decision.delay !== undefined
          ? durationToMs(decision.delay)
          : backoffDelayMs(attempt);
      if (delayMs > 0) await untilAborted(wait(delayMs, signal), signal);
      attempt += 1;
      continue;
    }
    if (decision.action === Action.ACTION_CORRECT && options.correct !== undefined) {
      const corrected = await untilAborted(Promise.resolve(options.correct(info)), signal);
      if (corrected === undefined) throw fail();
      params = corrected;
      validationRetriesUsed += 1;
      if (decision.consumesAttempt) attempt += 1;
      continue;
    }
    throw fail();
  }
}
