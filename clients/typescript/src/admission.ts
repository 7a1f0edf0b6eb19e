// Admission before a dispatch: the client's fail-open answer, and the
// runner's wait for the pod to admit a call to an upstream.
import { durationFromMs, durationToMs, roundHalfEven } from "./duration";
import { Action, BreakerState, Reason } from "./gen/squawk/v1/policy";
import type { Admission, AdmitInput, CallOptions, Decision } from "./options";
import { untilAborted, type Sleep } from "./wait";

/**
 * What admit answers when the daemon cannot: allowed. A pod state nobody
 * can read must not stop every executor; the upstream itself still answers.
 */
export function openAdmission(): Admission {
  return {
    allowed: true,
    reason: Reason.REASON_ADMITTED,
    retryAfter: undefined,
    breakerState: BreakerState.BREAKER_STATE_CLOSED,
    probe: false,
    fallback: true,
  };
}

/** What the runner's wait for admission needs. */
export interface Gate {
  readonly admit: (input: AdmitInput, options?: CallOptions) => Promise<Admission>;
  readonly upstream: string;
  readonly capability: string;
  readonly profile: string;
  /** Refusals in a row that may be waited out: the attempt budget. */
  readonly budget: number;
  /** The ms left of the step's deadline, or undefined without one. */
  readonly deadlineLeftMs: () => number | undefined;
  readonly sleep: Sleep;
  readonly signal: AbortSignal | undefined;
}

/** The FAIL that ends a step the pod would not admit. */
function refused(admission: Admission, explanation: string): Decision {
  return {
    action: Action.ACTION_FAIL,
    delay: durationFromMs(0),
    reason: admission.reason,
    explanation,
    consumesAttempt: true,
    classification: undefined,
    // When the upstream admits again, for a caller that schedules the step later.
    retryAfter: admission.retryAfter,
    fallback: admission.fallback,
  };
}

/**
 * Ask the pod to admit one dispatch, waiting out each refusal's retry_after
 * (cancellable). Resolves undefined once admitted, or with the FAIL decision
 * that ends the step: a refusal past the attempt budget in a row, or one
 * whose wait outlasts the deadline. A refusal consumes no attempt.
 */
export async function awaitAdmission(gate: Gate): Promise<Decision | undefined> {
  const { upstream, signal } = gate;
  for (let refusals = 1; ; refusals++) {
    const admission = await gate.admit(
      { upstream, capability: gate.capability, profile: gate.profile },
      signal === undefined ? {} : { signal },
    );
    if (admission.allowed) return undefined;
    const waitMs = admission.retryAfter === undefined ? 0 : durationToMs(admission.retryAfter);
    // The deadline first, then the cap: the same order in every client.
    const left = gate.deadlineLeftMs();
    if (left !== undefined && waitMs > left) {
      return refused(
        admission,
        `The pod refused the dispatch to ${upstream}: ${admission.reason}; ` +
          `it admits again in ${roundHalfEven(waitMs)} ms, past the step's deadline.`,
      );
    }
    if (refusals > gate.budget) {
      return refused(admission, `The pod refused the dispatch to ${upstream} ${refusals} times in a row: ${admission.reason}.`);
    }
    // Whole ms, rounded up: a wait cut short by a fraction would only be refused again.
    if (waitMs > 0) await untilAborted(gate.sleep(Math.ceil(waitMs), signal), signal);
  }
}
