// The error hook's rule, as the contract words it: what each verdict makes
// of each decision, and how the runner acts on it.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  Action,
  ClassifyResponse,
  durationFromMs,
  Reason,
  runStep,
  StepError,
  StepFailedError,
  type Decision,
  type DecisionSource,
  type FallbackProfile,
} from "../src/index";
import { DEFAULT_BACKOFF } from "../src/backoff";
import { DEFAULT_FALLBACK_PROFILE } from "../src/fallback";
import { override } from "../src/hooks";

function decision(action: Action, reason: Reason, delayMs = 0, retryAfterMs?: number): Decision {
  return {
    action,
    reason,
    delay: durationFromMs(delayMs),
    explanation: "the policy's own words",
    consumesAttempt: action !== Action.ACTION_CORRECT,
    retryAfter: undefined,
    classification: ClassifyResponse.fromPartial({
      httpStatus: 403,
      retryAfter: retryAfterMs === undefined ? undefined : durationFromMs(retryAfterMs),
    }),
    decisionId: "",
    fallback: false,
  };
}

const RETRY = decision(Action.ACTION_RETRY, Reason.REASON_TRANSIENT_STATUS, 250);
const CORRECT = decision(Action.ACTION_CORRECT, Reason.REASON_CORRECTION_ELIGIBLE);
const FAIL = decision(Action.ACTION_FAIL, Reason.REASON_NO_CORRECTION_AVAILABLE);

describe("override", () => {
  test("'fail' turns a RETRY into FAIL, keeping the reason", () => {
    assert.deepEqual(override(RETRY, "fail", 1, 3, DEFAULT_BACKOFF), {
      ...RETRY,
      action: Action.ACTION_FAIL,
      delay: { seconds: 0, nanos: 0 },
      consumesAttempt: true,
      explanation: "The error hook ended the step; the policy had answered ACTION_RETRY, REASON_TRANSIENT_STATUS.",
    });
  });

  test("'fail' turns a CORRECT into FAIL", () => {
    assert.deepEqual(override(CORRECT, "fail", 2, 3, DEFAULT_BACKOFF), {
      ...CORRECT,
      action: Action.ACTION_FAIL,
      delay: { seconds: 0, nanos: 0 },
      consumesAttempt: true,
      explanation: "The error hook ended the step; the policy had answered ACTION_CORRECT, REASON_CORRECTION_ELIGIBLE.",
    });
  });

  test("'fail' leaves a FAIL as it is", () => {
    assert.equal(override(FAIL, "fail", 1, 3, DEFAULT_BACKOFF), FAIL);
  });

  test("'retry' turns a FAIL into a resend after the default backoff", () => {
    assert.deepEqual(override(FAIL, "retry", 1, 3, DEFAULT_BACKOFF), {
      ...FAIL,
      action: Action.ACTION_RETRY,
      delay: { seconds: 0, nanos: 542_000_000 },
      consumesAttempt: true,
      explanation:
        "The error hook asked for a resend; the policy had answered ACTION_FAIL, REASON_NO_CORRECTION_AVAILABLE. " +
        "Resend the same payload after 542 ms, attempt 2 of 3.",
    });
  });

  test("'retry' turns a CORRECT into a resend that consumes an attempt", () => {
    const out = override(CORRECT, "retry", 2, 5, DEFAULT_BACKOFF);
    assert.equal(out.action, Action.ACTION_RETRY);
    assert.equal(out.consumesAttempt, true);
    assert.deepEqual(out.delay, { seconds: 1, nanos: 91_000_000 });
    assert.equal(
      out.explanation,
      "The error hook asked for a resend; the policy had answered ACTION_CORRECT, REASON_CORRECTION_ELIGIBLE. " +
        "Resend the same payload after 1091 ms, attempt 3 of 5.",
    );
  });

  test("'retry' waits the classification's Retry-After when there is one", () => {
    const terminal = decision(Action.ACTION_FAIL, Reason.REASON_TERMINAL_STATUS, 0, 3000);
    const out = override(terminal, "retry", 1, 3, DEFAULT_BACKOFF);
    assert.deepEqual(out.delay, { seconds: 3, nanos: 0 });
    assert.match(out.explanation, /after 3000 ms, attempt 2 of 3\.$/);
  });

  test("'retry' waits the given backoff", () => {
    const out = override(FAIL, "retry", 1, 3, { initialMs: 100, maxMs: 10_000, factor: 2 });
    // 100 * (1 + 0.1 * sin 1) = 108.41...
    assert.deepEqual(out.delay, { seconds: 0, nanos: 108_000_000 });
  });

  test("'retry' leaves a RETRY as it is", () => {
    assert.equal(override(RETRY, "retry", 1, 3, DEFAULT_BACKOFF), RETRY);
  });

  for (const reason of [Reason.REASON_CANCELLED, Reason.REASON_ATTEMPTS_EXHAUSTED, Reason.REASON_DEADLINE_EXCEEDED]) {
    test(`'retry' cannot override ${reason}`, () => {
      const final = decision(Action.ACTION_FAIL, reason);
      assert.equal(override(final, "retry", 1, 3, DEFAULT_BACKOFF), final);
    });
  }

  test("'retry' never goes past the attempt budget", () => {
    assert.equal(override(FAIL, "retry", 3, 3, DEFAULT_BACKOFF), FAIL);
    assert.equal(override(FAIL, "retry", 4, 3, DEFAULT_BACKOFF), FAIL);
  });

  test("'default' follows the decision", () => {
    for (const d of [RETRY, CORRECT, FAIL]) assert.equal(override(d, "default", 1, 3, DEFAULT_BACKOFF), d);
  });
});

/** Answers every failure with `answer`. */
function always(answer: Decision, profile: FallbackProfile = DEFAULT_FALLBACK_PROFILE): DecisionSource {
  const noUpstream = (): never => assert.fail("a step without an upstream asked the pod");
  return { fallbackProfile: profile, decideRetry: async () => answer, admit: noUpstream, reportOutcome: noUpstream };
}

/** Fail every time; the hook answers "retry" every time. Returns the waits and the calls made. */
async function retryForever(source: DecisionSource, maxAttempts?: number): Promise<{ waits: number[]; calls: number }> {
  const waits: number[] = [];
  let calls = 0;
  await assert.rejects(
    runStep(
      source,
      0,
      async () => {
        calls += 1;
        throw new StepError("no", { httpStatus: 400 });
      },
      { maxAttempts, sleep: async (ms) => void waits.push(ms), onError: () => "retry" },
    ),
    (e: unknown) => e instanceof StepFailedError && e.decision === FAIL && e.calls === calls,
  );
  return { waits, calls };
}

describe("runStep with the error hook", () => {
  test("forced resends stop at maxAttempts", async () => {
    assert.deepEqual(await retryForever(always(FAIL), 2), { waits: [542], calls: 2 });
  });

  test("without maxAttempts, forced resends stop at the client's default profile's budget", async () => {
    const profile: FallbackProfile = { ...DEFAULT_FALLBACK_PROFILE, maxAttempts: 4 };
    assert.deepEqual(await retryForever(always(FAIL, profile)), { waits: [542, 1091, 2028], calls: 4 });
  });
});
