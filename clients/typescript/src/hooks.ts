// The error hook's verdicts and the one rule that applies them, the same in
// every Squawk client.
import { backoffDelayMs, type BackoffConfig } from "./backoff";
import { durationFromMs, durationToMs, roundHalfEven } from "./duration";
import { Action, Reason, type DecideRetryRequest } from "./gen/squawk/v1/policy";
import type { Decision } from "./options";

/**
 * The error hook's verdict: "default" (or undefined) follows the decision;
 * "fail" ends the step whatever the decision said; "retry" resends the same
 * parameters when the decision said CORRECT or FAIL, after the failure's
 * Retry-After or else the default profile's backoff, but never after a
 * CANCELLED, ATTEMPTS_EXHAUSTED or DEADLINE_EXCEEDED decision nor past the
 * attempt budget.
 */
export type Tier = "default" | "retry" | "fail";

/** What the error hook is shown after each failed attempt. */
export interface ErrorInfo {
  /** The 1-based number of the attempt that failed. */
  readonly attempt: number;
  /** How many corrections were applied so far. */
  readonly correctionsUsed: number;
  /** What the step threw. */
  readonly error: unknown;
  /** The DecideRetry request sent for this failure. */
  readonly request: DecideRetryRequest;
  /** The policy's answer (the daemon's or the local fallback's). */
  readonly decision: Decision;
}

const TIERS: ReadonlySet<unknown> = new Set<Tier>(["default", "retry", "fail"]);

/** The hook's answer as a Tier; anything else is a programming error, named. */
export function tierOf(verdict: unknown): Tier {
  if (verdict === undefined) return "default";
  if (TIERS.has(verdict)) return verdict as Tier;
  throw new TypeError(`onError returned ${JSON.stringify(verdict)}; expected "default", "retry", "fail" or undefined`);
}

/** Reasons no hook may turn into a resend: cancelled, attempts spent, or a wait past the deadline. */
const FINAL: ReadonlySet<Reason> = new Set([
  Reason.REASON_CANCELLED,
  Reason.REASON_ATTEMPTS_EXHAUSTED,
  Reason.REASON_DEADLINE_EXCEEDED,
]);

/**
 * `decision` after the hook's `tier`, for failed attempt `attempt` under an
 * attempt budget of `budget`; `backoff` is the default profile's, for a
 * forced resend without a Retry-After.
 */
export function override(decision: Decision, tier: Tier, attempt: number, budget: number, backoff: BackoffConfig): Decision {
  const had = `${decision.action}, ${decision.reason}`;
  if (tier === "fail") {
    if (decision.action === Action.ACTION_FAIL) return decision;
    return {
      ...decision,
      action: Action.ACTION_FAIL,
      delay: durationFromMs(0),
      consumesAttempt: true,
      explanation: `The error hook ended the step; the policy had answered ${had}.`,
    };
  }
  if (tier === "retry") {
    if (decision.action === Action.ACTION_RETRY || FINAL.has(decision.reason) || attempt >= budget) return decision;
    const hint = decision.classification?.retryAfter;
    const delayMs = hint !== undefined ? durationToMs(hint) : backoffDelayMs(attempt, backoff);
    return {
      ...decision,
      action: Action.ACTION_RETRY,
      delay: durationFromMs(delayMs),
      consumesAttempt: true,
      explanation:
        `The error hook asked for a resend; the policy had answered ${had}. ` +
        `Resend the same payload after ${roundHalfEven(delayMs)} ms, attempt ${attempt + 1} of ${budget}.`,
    };
  }
  return decision;
}
