// The local fallback: what the client decides alone when the daemon did not
// answer, as docs/fallback.md specifies it. Its numbers and tables are
// generated into fallback_table.ts from clients/fallback/contract.json; the
// cases in clients/fallback/cases.json check it, through one runner, against
// the same expectations as the other clients. The requested profile is not
// consulted: the fallback routes by the default rules.
import { backoffDelayMs, DEFAULT_BACKOFF, type BackoffConfig } from "./backoff";
import { checkStatus, classifyFailure, isTerminalStatus, isTransientStatus } from "./classify";
import { durationFromMs, durationToMs, roundHalfEven } from "./duration";
import { declaresNotRetryable } from "./envelope";
import { SquawkInputError } from "./errors";
import { DEFAULT_MAX_ATTEMPTS, MAX_BODY_BYTES, MAX_RETRY_WAIT_MS, PROFILE_NAME } from "./fallback_table";
import { pushbackRefuses, shouldRetry, waitHint } from "./headers";
import { spentQuotaWait } from "./quota";
import {
  Action,
  Reason,
  type DecideRetryRequest,
  type DecideRetryResponse,
} from "./gen/squawk/v1/policy";

export interface FallbackProfile {
  /** Attempts allowed when the request leaves max_attempts unset (default 3). */
  readonly maxAttempts: number;
  readonly backoff: BackoffConfig;
  /** The largest response body accepted, in bytes (default 1 MiB). */
  readonly maxBodyBytes: number;
}

export const DEFAULT_FALLBACK_PROFILE: FallbackProfile = Object.freeze({
  maxAttempts: DEFAULT_MAX_ATTEMPTS,
  backoff: DEFAULT_BACKOFF,
  maxBodyBytes: MAX_BODY_BYTES,
});

/** Throw SquawkInputError naming the first field the policy cannot accept. */
export function validateDecideRequest(req: DecideRetryRequest, maxBodyBytes = DEFAULT_FALLBACK_PROFILE.maxBodyBytes): void {
  const bad = (field: string, why: string): never => {
    throw new SquawkInputError(field, `${field}: ${why}`);
  };
  if (req.attempt < 1) bad("attempt", `must be >= 1 (1-based), got ${req.attempt}`);
  if (req.maxAttempts !== undefined && req.maxAttempts < 1) {
    bad("max_attempts", `must be >= 1 when set, got ${req.maxAttempts}`);
  }
  checkStatus(req.httpStatus);
  if (req.validationRetriesUsed < 0) {
    bad("validation_retries_used", `must be >= 0, got ${req.validationRetriesUsed}`);
  }
  if (req.maxValidationRetries !== undefined && req.maxValidationRetries < 0) {
    bad("max_validation_retries", `must be >= 0 when set, got ${req.maxValidationRetries}`);
  }
  if (req.deadline !== undefined && durationToMs(req.deadline) < 0) bad("deadline", "must not be negative");
  if (req.responseBody.length > maxBodyBytes) {
    bad("response_body", `${req.responseBody.length} bytes is over the limit of ${maxBodyBytes} bytes`);
  }
}

/** Decide one failed attempt under the default profile with corrections disabled. */
export function fallbackDecide(
  req: DecideRetryRequest,
  nowMs: number,
  profile: FallbackProfile = DEFAULT_FALLBACK_PROFILE,
): DecideRetryResponse {
  validateDecideRequest(req, profile.maxBodyBytes);
  const seen = classifyFailure(req.httpStatus, req.transportFailure, req.headers, nowMs);
  const status = req.httpStatus;
  const transport = req.transportFailure || status === 0;
  const answer = (action: Action, reason: Reason, explanation: string, delayMs = 0): DecideRetryResponse => ({
    action,
    delay: durationFromMs(delayMs),
    reason,
    explanation,
    consumesAttempt: true,
    classification: seen,
    // The pod's upstream state lives in the daemon; the fallback has none.
    retryAfter: undefined,
    // Nor a decision the daemon kept: nothing for ExplainDecision.
    decisionId: "",
  });
  const fail = (reason: Reason, explanation: string): DecideRetryResponse => answer(Action.ACTION_FAIL, reason, explanation);

  if (req.cancelled) {
    return fail(Reason.REASON_CANCELLED, "The step was cancelled; nothing is retried after cancellation.");
  }
  if (declaresNotRetryable(req.responseBody)) {
    return fail(
      Reason.REASON_EXPLICIT_NOT_RETRYABLE,
      "The component declared error.retryable=false, which stops every same-step retry.",
    );
  }
  if (!transport && isTerminalStatus(status)) {
    return fail(
      Reason.REASON_TERMINAL_STATUS,
      `HTTP ${status} is an authentication or method error; retrying cannot fix it.`,
    );
  }
  if (req.delegatedOrchestrator) {
    return fail(
      Reason.REASON_SINGLE_DISPATCH,
      "A delegated orchestrator is dispatched exactly once; it is never retried here.",
    );
  }
  const server = shouldRetry(req.headers);
  const marked = !transport && !isTransientStatus(status) && server === true;
  if (transport || isTransientStatus(status) || marked) {
    const reason = transport ? Reason.REASON_TRANSPORT_FAILURE : Reason.REASON_TRANSIENT_STATUS;
    const what = transport
      ? "The call failed in transport"
      : marked
        ? `HTTP ${status} is marked retryable by the server's x-should-retry`
        : `HTTP ${status} is transient`;
    // Before the attempt count, as the daemon reads it (decide.py).
    if (pushbackRefuses(req.headers)) {
      return fail(
        Reason.REASON_SERVER_PUSHBACK,
        `${what}, but the server's grpc-retry-pushback-ms asks not to retry (a negative or unparsable value).`,
      );
    }
    if (!transport && server === false) {
      return fail(Reason.REASON_SERVER_PUSHBACK, `${what}, but the server's x-should-retry: false asks not to retry.`);
    }
    const maxAttempts = req.maxAttempts ?? profile.maxAttempts;
    if (req.attempt >= maxAttempts) {
      return fail(
        Reason.REASON_ATTEMPTS_EXHAUSTED,
        `${what}, but attempt ${req.attempt} of ${maxAttempts} was the last.`,
      );
    }
    // A 429 without a wait hint waits for the last spent quota's reset.
    const spent =
      seen.retryAfter === undefined && !transport && status === 429 ? spentQuotaWait(req.headers, nowMs) : undefined;
    const waitMs =
      seen.retryAfter !== undefined
        ? durationToMs(seen.retryAfter)
        : spent !== undefined
          ? spent.ms
          : backoffDelayMs(req.attempt, profile.backoff);
    const deadlineMs = req.deadline === undefined ? undefined : durationToMs(req.deadline);
    if (deadlineMs !== undefined && waitMs > deadlineMs) {
      return fail(
        Reason.REASON_DEADLINE_EXCEEDED,
        `${what}, but the ${roundHalfEven(waitMs)} ms wait would outlast the ` +
          `${roundHalfEven(deadlineMs)} ms left before the step's deadline.`,
      );
    }
    // The wait is the classification's; which header gave it is asked of the
    // parser that chose it.
    const hint = seen.retryAfter === undefined ? undefined : waitHint(req.headers, nowMs);
    // Who asked for the wait, when the server did; undefined for the backoff.
    const asker =
      hint !== undefined
        ? `the server's ${hint.from}`
        : spent !== undefined
          ? `the server's ${spent.from} (remaining 0)`
          : undefined;
    // Without a deadline, a wait the server asks for is held to the built-in
    // profile's max_retry_wait; with one, the deadline judges it.
    if (deadlineMs === undefined && asker !== undefined && waitMs > MAX_RETRY_WAIT_MS) {
      return fail(
        Reason.REASON_WAIT_TOO_LONG,
        `${what}, but ${asker} asks for ${roundHalfEven(waitMs)} ms, past the profile's max_retry_wait ` +
          `of ${MAX_RETRY_WAIT_MS} ms and there is no deadline to judge it by.`,
      );
    }
    const source =
      hint !== undefined
        ? `the server's ${hint.from}`
        : spent !== undefined
          ? `the server's ${spent.from}, remaining 0`
          : "backoff";
    return answer(
      Action.ACTION_RETRY,
      reason,
      `${what}; resend the same payload after ${roundHalfEven(waitMs)} ms (${source}), ` +
        `attempt ${req.attempt + 1} of ${maxAttempts}.`,
      waitMs,
    );
  }
  if (status >= 400 && status < 500) {
    if (req.hitlApproved) {
      return fail(
        Reason.REASON_HITL_PROTECTED,
        `HTTP ${status} on human-approved inputs; they are never rewritten or resent.`,
      );
    }
    // The daemon's sentence: without it no analyzer runs, and the fallback
    // answers as the daemon does when none is enabled.
    return fail(
      Reason.REASON_NO_CORRECTION_AVAILABLE,
      `HTTP ${status} needs corrected parameters and no analyzer or correction hook is enabled; ` +
        "a non-transient 4xx is never resent unchanged.",
    );
  }
  return fail(
    Reason.REASON_NOT_RETRYABLE_STATUS,
    `HTTP ${status} is not in profile '${PROFILE_NAME}''s retryable set.`,
  );
}
