// Admission before a dispatch: the client's fail-open answer, and the
// runner's wait for the pod to admit a call to an upstream.
import { durationFromMs, durationToMs, roundHalfEven } from "./duration";
import type { Duration } from "./gen/google/protobuf/duration";
import { Action, BreakerState, Reason, type AdmitResponse, type Criticality } from "./gen/squawk/v1/policy";
import type { Admission, AdmitInput, CallOptions, Decision } from "./options";
import { untilAborted, type Sleep } from "./wait";

/** The most characters of an Admit answer's explanation a decision quotes. */
export const MAX_EXPLANATION_CHARS = 512;

/** Text from the wire, cut to at most `max` code points (never inside a surrogate pair). */
function boundedText(text: string, max: number): string {
  if (text.length <= max) return text;
  return Array.from(text).slice(0, max).join("");
}

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
    wait: undefined,
    permits: 1,
    lease: undefined,
    explanation: "",
    admissionId: "",
    spacing: undefined,
    holdsSlot: false,
    decisionId: "",
    fallback: true,
  };
}

/** A spare permit taken from a lease: its grant's admission, and its start. */
export interface LeasedPermit {
  /** The grant's admission id, which the dispatch's outcome names. */
  readonly admissionId: string;
  /** How long to wait for the permit's start, ms (0: it may start now). */
  readonly waitMs: number;
  /** The grant's spacing, ms (0: nothing paces the upstream). */
  readonly spacingMs: number;
}

/**
 * A dispatch admitted by a spare permit the client holds from an earlier
 * grant (see leasePermits): it names that grant's admission, and waits for
 * the permit's start as for a paced Admit's `wait`. It holds no slot of a
 * declared cap on calls in flight: the pod grants no lease under one.
 */
export function leasedAdmission(permit: LeasedPermit): Admission {
  return {
    ...openAdmission(),
    admissionId: permit.admissionId,
    wait: permit.waitMs > 0 ? durationFromMs(permit.waitMs) : undefined,
    spacing: permit.spacingMs > 0 ? durationFromMs(permit.spacingMs) : undefined,
    fallback: false,
  };
}

/**
 * The longest spacing honoured: a lease is kept at most a second, so a
 * longer spacing would start no spare permit within it.
 */
export const MAX_SPACING_MS = 1000;

/**
 * An answer's spacing, clamped to [0, 1 s]: undefined (zero) unless it
 * grants more than one permit, as the Python client reads it.
 */
export function spacingOf(answer: AdmitResponse): Duration | undefined {
  if (!(answer.allowed && answer.permits > 1) || answer.spacing === undefined) return undefined;
  const ms = durationToMs(answer.spacing);
  if (!(ms > 0)) return undefined;
  return ms > MAX_SPACING_MS ? durationFromMs(MAX_SPACING_MS) : answer.spacing;
}

/**
 * An answer's admission id, kept only in the shape the daemon gives (16
 * lowercase hex digits): it is sent back, and anything else would have the
 * report refused.
 */
export function admissionIdOf(text: string): string {
  return /^[0-9a-f]{16}$/.test(text) ? text : "";
}

/** The longest decision id kept from an answer (the daemon's ExplainDecisionRequest.decision_id bound). */
export const MAX_DECISION_ID_CHARS = 64;

/**
 * An answer's decision id (AdmitResponse.decision_id,
 * DecideRetryResponse.decision_id), kept only as the daemon gives it: at
 * most 64 characters of printable ASCII. An answer is hostile input until
 * bounded: the id reaches error messages, logs and `squawk explain`, so
 * anything longer, or holding a control character or non-ASCII, is "".
 */
export function decisionIdOf(text: unknown): string {
  return typeof text === "string" && text.length <= MAX_DECISION_ID_CHARS && /^[\x20-\x7e]*$/.test(text) ? text : "";
}

/** The longest deadline Admit accepts (AdmitRequest.deadline: at most a day). */
export const MAX_ADMIT_DEADLINE_MS = 86_400_000;

/** What the runner's wait for admission needs. */
export interface Gate {
  readonly admit: (input: AdmitInput, options?: CallOptions) => Promise<Admission>;
  readonly upstream: string;
  readonly capability: string;
  readonly profile: string;
  /** The step's estimated cost in the upstream's token units, sent with Admit (0 = unknown). */
  readonly cost: number;
  /** The step's criticality, sent with Admit (undefined = unset, read as CRITICAL). */
  readonly criticality: Criticality | undefined;
  /** Whose call it is, sent with Admit ("" = none). */
  readonly fairnessKey: string;
  /** The key's weight, sent with Admit (0 = 1). */
  readonly fairnessWeight: number;
  /** Refusals in a row that may be waited out: the attempt budget. */
  readonly budget: number;
  /** The ms left of the step's deadline, or undefined without one. */
  readonly deadlineLeftMs: () => number | undefined;
  readonly sleep: Sleep;
  readonly signal: AbortSignal | undefined;
}

/**
 * What the wait for admission ends with: the FAIL that ends the step, or
 * leave to dispatch, with the admission its outcome names, whether the
 * dispatch starts on a lease of paced starts (`patient`: its success may
 * wait longer in a batched report) and whether it holds a slot of the
 * upstream's declared cap on calls in flight (`urgent`: its success is
 * reported at once, for the caller waiting for the slot).
 */
export type Admitted =
  | { readonly refusal: Decision }
  | {
      readonly refusal?: undefined;
      readonly probe: boolean;
      readonly admissionId: string;
      readonly patient: boolean;
      readonly urgent: boolean;
    };

/**
 * The FAIL that ends a step the pod would not admit (in time). It carries
 * the refusal's decision id (for explainDecision, `squawk explain ID`) when
 * the daemon refused the dispatch; a paced start past the deadline is the
 * runner's own refusal of an admitted call, and carries none.
 */
function refused(
  admission: Admission,
  explanation: string,
  reason = admission.reason,
  retryAfter = admission.retryAfter,
  decisionId = admission.allowed ? "" : decisionIdOf(admission.decisionId),
): Decision {
  return {
    action: Action.ACTION_FAIL,
    delay: durationFromMs(0),
    reason,
    explanation,
    consumesAttempt: true,
    classification: undefined,
    // When the upstream admits again, for a caller that schedules the step later.
    retryAfter,
    decisionId,
    fallback: admission.fallback,
  };
}

/** What Admit is asked for one dispatch: the names, the deadline left (capped at a day), the estimated cost, the criticality and the fairness key and weight. */
function admitInput(gate: Gate): AdmitInput {
  const left = gate.deadlineLeftMs();
  return {
    upstream: gate.upstream,
    capability: gate.capability,
    profile: gate.profile,
    // A step's budget longer than Admit accepts is sent as the longest it
    // accepts: no pacer wait comes near a day.
    ...(left === undefined ? {} : { deadline: durationFromMs(Math.min(left, MAX_ADMIT_DEADLINE_MS)) }),
    ...(gate.cost > 0 ? { cost: gate.cost } : {}),
    ...(gate.criticality === undefined ? {} : { criticality: gate.criticality }),
    ...(gate.fairnessKey === "" ? {} : { fairnessKey: gate.fairnessKey }),
    ...(gate.fairnessWeight > 0 ? { fairnessWeight: gate.fairnessWeight } : {}),
  };
}

/**
 * Ask the pod to admit one dispatch (with the step's deadline left and its
 * estimated cost), waiting out each refusal's retry_after (cancellable).
 * Resolves with the admission once the dispatch may start: admitted, and
 * the pacer's `wait` slept (a zero wait is no sleep), without asking again;
 * a spare permit of a lease (see leasePermits) comes with the wait for its
 * start, slept the same way. Resolves with the FAIL decision that ends
 * the step: a refusal with REASON_UPSTREAM_SATURATED at once (the pod sheds
 * what it cannot start in time; no sleep), a paced wait longer than the
 * deadline left (the same reason, without sleeping), a refusal past the
 * attempt budget in a row (REASON_IN_FLIGHT_CAP's are not counted), or one
 * whose retry_after outlasts the deadline. A refusal consumes no attempt.
 */
export async function awaitAdmission(gate: Gate): Promise<Admitted> {
  const { upstream, signal } = gate;
  for (let refusals = 1; ; refusals++) {
    const admission = await gate.admit(admitInput(gate), signal === undefined ? {} : { signal });
    if (admission.allowed) {
      const refusal = await paced(gate, admission);
      if (refusal !== undefined) return { refusal };
      const patient = admission.spacing !== undefined && durationToMs(admission.spacing) > 0;
      return { probe: admission.probe, admissionId: admission.admissionId, patient, urgent: admission.holdsSlot };
    }
    if (admission.reason === Reason.REASON_UPSTREAM_SATURATED) {
      // The daemon names the limit (the queue's, the deadline, the
      // concurrency limit); an older one does not, and the deadline is not always it.
      const why =
        boundedText(admission.explanation ?? "", MAX_EXPLANATION_CHARS) ||
        "The upstream's pace cannot start it within the step's deadline or the queue's limit.";
      const explanation = `The pod shed the dispatch to ${upstream}: ${admission.reason}. ${why}`;
      return { refusal: refused(admission, explanation) };
    }
    const waitMs = admission.retryAfter === undefined ? 0 : durationToMs(admission.retryAfter);
    // The deadline first, then the cap: the same order in every client.
    const left = gate.deadlineLeftMs();
    if (left !== undefined && waitMs > left) {
      const explanation =
        `The pod refused the dispatch to ${upstream}: ${admission.reason}; ` +
        `it admits again in ${roundHalfEven(waitMs)} ms, past the step's deadline.`;
      return { refusal: refused(admission, explanation) };
    }
    // A full in-flight cap is waited out for as long as the deadline allows:
    // its refusals are a semaphore's queue, not an upstream that failed.
    if (refusals > gate.budget && admission.reason !== Reason.REASON_IN_FLIGHT_CAP) {
      const explanation = `The pod refused the dispatch to ${upstream} ${refusals} times in a row: ${admission.reason}.`;
      return { refusal: refused(admission, explanation) };
    }
    // Whole ms, rounded up: a wait cut short by a fraction would only be refused again.
    if (waitMs > 0) await untilAborted(gate.sleep(Math.ceil(waitMs), signal), signal);
  }
}

/**
 * Sleep an admitted dispatch's paced start (a paced Admit's or a leased
 * permit's), or end the step when the start would come after its
 * deadline: REASON_UPSTREAM_SATURATED, with the wait as the time after
 * which a new step could start.
 */
async function paced(gate: Gate, admission: Admission): Promise<Decision | undefined> {
  const waitMs = admission.wait === undefined ? 0 : durationToMs(admission.wait);
  if (!(waitMs > 0)) return undefined;
  // Without a deadline a wait is still bounded: the pod never paces a start
  // a day away, so an answer that does is not slept (it would stall the step).
  const left = Math.min(gate.deadlineLeftMs() ?? MAX_ADMIT_DEADLINE_MS, MAX_ADMIT_DEADLINE_MS);
  if (waitMs > left) {
    return refused(
      admission,
      `The pod paces the dispatch to ${gate.upstream} to start in ${roundHalfEven(waitMs)} ms, past the step's deadline.`,
      Reason.REASON_UPSTREAM_SATURATED,
      admission.wait,
      // The daemon admitted it: no refusal of its to explain.
      "",
    );
  }
  // Whole ms, rounded up: a start a fraction early would overrun the pace.
  await untilAborted(gate.sleep(Math.ceil(waitMs), gate.signal), gate.signal);
  return undefined;
}
