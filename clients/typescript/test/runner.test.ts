// runStep with a scripted decision source: the runner's own mechanics
// (hooks, cancellation, options). The policy itself is exercised by
// runner-vectors.test against the daemon and the fallback.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import {
  Action,
  BreakerState,
  criticality,
  Criticality,
  durationFromMs,
  durationToMs,
  Reason,
  runStep,
  SquawkInputError,
  StepError,
  StepFailedError,
  type Admission,
  type AdmitInput,
  type Decision,
  type DecideRetryInput,
  type DecisionSource,
  type ErrorInfo,
  type ReportOutcomeInput,
  type Sleep,
  type Tier,
} from "../src/index";
import { DEFAULT_FALLBACK_PROFILE } from "../src/fallback";

function decision(action: Action, reason: Reason, delayMs = 0, consumesAttempt = true): Decision {
  return {
    action,
    reason,
    delay: durationFromMs(delayMs),
    explanation: `${action} ${reason}`,
    consumesAttempt,
    retryAfter: undefined,
    classification: undefined,
    decisionId: "",
    fallback: false,
  };
}
const RETRY = (ms = 100): Decision => decision(Action.ACTION_RETRY, Reason.REASON_TRANSIENT_STATUS, ms);
const CORRECT = decision(Action.ACTION_CORRECT, Reason.REASON_CORRECTION_ELIGIBLE, 0, false);
const FAIL = decision(Action.ACTION_FAIL, Reason.REASON_NO_CORRECTION_AVAILABLE);
const CANCELLED = decision(Action.ACTION_FAIL, Reason.REASON_CANCELLED);

/**
 * Answers with the scripted decisions in turn, and records every request;
 * admits every dispatch and records the admissions and reports asked for.
 */
class Script implements DecisionSource {
  readonly fallbackProfile = DEFAULT_FALLBACK_PROFILE;
  readonly requests: DecideRetryInput[] = [];
  readonly admits: AdmitInput[] = [];
  readonly reports: ReportOutcomeInput[] = [];
  /** `admissions`: what Admit answers in turn (over an allowed answer); past its end, allowed at once. */
  constructor(
    private readonly answers: Decision[],
    private readonly admissions: Partial<Admission>[] = [],
  ) {}
  async admit(input: AdmitInput): Promise<Admission> {
    this.admits.push(input);
    return { ...ADMITTED, ...this.admissions.shift() };
  }
  async reportOutcome(input: ReportOutcomeInput): Promise<number> {
    this.reports.push(input);
    return input.outcomes.length;
  }
  async decideRetry(input: DecideRetryInput): Promise<Decision> {
    this.requests.push(input);
    if (input.cancelled) return CANCELLED;
    const next = this.answers.shift();
    assert.ok(next, "the runner asked more often than scripted");
    return next;
  }
}

const ADMITTED: Admission = {
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
  fallback: false,
};

function recordingSleep(): { sleep: Sleep; waits: number[] } {
  const waits: number[] = [];
  return { waits, sleep: async (ms) => void waits.push(ms) };
}

const busy = (): Promise<never> => Promise.reject(new StepError("busy", { httpStatus: 503 }));

describe("runStep", () => {
  test("retries after the decision's delay, then succeeds", async () => {
    const script = new Script([RETRY(542), RETRY(1091)]);
    const { sleep, waits } = recordingSleep();
    const seen: number[] = [];
    const result = await runStep(
      script,
      { city: "PAR" },
      async (params, ctx) => {
        seen.push(ctx.attempt);
        if (ctx.attempt < 3) {
          throw new StepError("busy", { httpStatus: 503, headers: { "Retry-After": "1" }, body: "<html>busy</html>" });
        }
        return `ok ${params.city}`;
      },
      { sleep, maxAttempts: 5 },
    );
    assert.equal(result, "ok PAR");
    assert.deepEqual(seen, [1, 2, 3]);
    assert.deepEqual(waits, [542, 1091]);
    assert.deepEqual(
      script.requests.map((r) => [r.attempt, r.httpStatus, r.transportFailure, r.maxAttempts, r.correctionAvailable]),
      [
        [1, 503, false, 5, false],
        [2, 503, false, 5, false],
      ],
    );
    assert.deepEqual(script.requests[0]?.headers, { "Retry-After": "1" });
    assert.equal(new TextDecoder().decode(script.requests[0]?.responseBody as Uint8Array), "<html>busy</html>");
  });

  test("any other thrown error is a transport failure", async () => {
    const script = new Script([RETRY(5)]);
    let calls = 0;
    const out = await runStep(
      script,
      null,
      async () => {
        calls += 1;
        if (calls === 1) throw new TypeError("fetch failed");
        return 42;
      },
      { sleep: recordingSleep().sleep },
    );
    assert.equal(out, 42);
    assert.equal(script.requests[0]?.transportFailure, true);
    assert.equal(script.requests[0]?.httpStatus, 0);
  });

  test("CORRECT calls the hook with the parameters, the error and the decision, and spends no attempt", async () => {
    // consumesAttempt is set on purpose: a correction never spends an attempt, whatever the answer says.
    const correctSpendingAttempt = { ...CORRECT, consumesAttempt: true };
    const script = new Script([correctSpendingAttempt, RETRY(1)]);
    const tried: Array<[string, number, number]> = [];
    const hook: Array<[string, unknown, Decision]> = [];
    const firstError = new StepError("error 400: INVALID CITY CODE", { httpStatus: 400 });
    const out = await runStep(
      script,
      "Paris",
      async (city, ctx) => {
        tried.push([city, ctx.attempt, ctx.correctionsUsed]);
        if (city !== "PAR") throw firstError;
        if (ctx.attempt === 1) throw new StepError("busy", { httpStatus: 503 });
        return city;
      },
      {
        sleep: recordingSleep().sleep,
        correct: (params, error, d) => {
          hook.push([params, error, d]);
          return "PAR";
        },
      },
    );
    assert.equal(out, "PAR");
    assert.deepEqual(tried, [
      ["Paris", 1, 0],
      ["PAR", 1, 1],
      ["PAR", 2, 1],
    ]);
    assert.deepEqual(hook, [["Paris", firstError, correctSpendingAttempt]]);
    assert.deepEqual(
      script.requests.map((r) => [r.attempt, r.validationRetriesUsed, r.correctionAvailable]),
      [
        [1, 0, true],
        [1, 1, true],
      ],
    );
  });

  test("a correction hook that throws ends the run with its error", async () => {
    const broken = new Error("no idea how to fix this");
    await assert.rejects(
      runStep(new Script([CORRECT]), 1, busy, {
        correct: () => {
          throw broken;
        },
      }),
      (e: unknown) => e === broken,
    );
  });

  test("CORRECT without a correction hook ends the step", async () => {
    await assert.rejects(
      runStep(new Script([CORRECT]), 1, busy),
      (e: unknown) => e instanceof StepFailedError && e.decision === CORRECT && e.calls === 1,
    );
  });

  test("FAIL rejects with the decision, the number of calls and the last error", async () => {
    const script = new Script([RETRY(1), FAIL]);
    const errors: StepError[] = [];
    await assert.rejects(
      runStep(
        script,
        0,
        async (_p, ctx) => {
          const error = new StepError(`try ${ctx.attempt}`, { httpStatus: ctx.attempt === 1 ? 503 : 400 });
          errors.push(error);
          throw error;
        },
        { sleep: recordingSleep().sleep },
      ),
      (e: unknown) => {
        assert.ok(e instanceof StepFailedError);
        assert.equal(e.decision, FAIL);
        assert.equal(e.cause, errors[1]);
        assert.equal(e.calls, 2);
        assert.match(e.message, /REASON_NO_CORRECTION_AVAILABLE/);
        return true;
      },
    );
  });

  test("the error hook sees exactly the attempt, corrections, error, request and decision", async () => {
    const script = new Script([CORRECT, RETRY(1), FAIL]);
    const seen: ErrorInfo[] = [];
    const errors: unknown[] = [];
    await assert.rejects(
      runStep(
        script,
        0,
        async () => {
          const error = new StepError("nope", { httpStatus: 422 });
          errors.push(error);
          throw error;
        },
        {
          sleep: recordingSleep().sleep,
          correct: (n) => n + 1,
          onError: (info) => void seen.push(info),
        },
      ),
      StepFailedError,
    );
    for (const info of seen) {
      assert.deepEqual(Object.keys(info).sort(), ["attempt", "correctionsUsed", "decision", "error", "request"]);
    }
    assert.deepEqual(
      seen.map((i) => [i.attempt, i.correctionsUsed, i.decision.action]),
      [
        [1, 0, Action.ACTION_CORRECT],
        [1, 1, Action.ACTION_RETRY],
        [2, 1, Action.ACTION_FAIL],
      ],
    );
    assert.deepEqual(
      seen.map((i) => i.error),
      errors,
    );
    assert.deepEqual(
      seen.map((i) => i.request),
      script.requests,
    );
  });

  test("an error hook answer that is not a tier is a clear error", async () => {
    await assert.rejects(
      runStep(new Script([FAIL]), 0, busy, { onError: () => "retyr" as Tier }),
      (e: unknown) => e instanceof TypeError && /onError returned "retyr"/.test(e.message),
    );
  });

  test("an abort during the wait stops at once and never retries", async () => {
    const script = new Script([RETRY(60_000)]);
    const controller = new AbortController();
    let calls = 0;
    const started = Date.now();
    const run = runStep(
      script,
      0,
      async () => {
        calls += 1;
        setTimeout(() => controller.abort(new Error("user cancelled")), 20);
        throw new StepError("busy", { httpStatus: 503 });
      },
      { signal: controller.signal },
    );
    await assert.rejects(run, /user cancelled/);
    assert.ok(Date.now() - started < 1000, "the 60 s wait was cut short");
    assert.equal(calls, 1);
  });

  test("an abort is honoured even by a sleep seam that ignores the signal", async () => {
    const controller = new AbortController();
    const run = runStep(new Script([RETRY(10)]), 0, busy, {
      signal: controller.signal,
      sleep: () => new Promise<void>(() => controller.abort(new Error("gone"))),
    });
    await assert.rejects(run, /gone/);
  });

  test("a step that fails after its signal aborted is decided as cancelled, whatever onError says", async () => {
    const script = new Script([]);
    const controller = new AbortController();
    await assert.rejects(
      runStep(
        script,
        0,
        async () => {
          controller.abort();
          throw new StepError("aborted", { httpStatus: 503 });
        },
        { signal: controller.signal, onError: () => "retry" },
      ),
      (e: unknown) => e instanceof StepFailedError && e.decision.reason === Reason.REASON_CANCELLED,
    );
    assert.equal(script.requests[0]?.cancelled, true);
  });

  test("an already aborted signal never runs the step", async () => {
    let ran = false;
    await assert.rejects(
      runStep(new Script([]), 0, async () => void (ran = true), { signal: AbortSignal.abort(new Error("early")) }),
      /early/,
    );
    assert.equal(ran, false);
  });

  test("the step's deadline is sent as the time left", async () => {
    const script = new Script([FAIL]);
    let clock = 1000;
    await assert.rejects(
      runStep(
        script,
        0,
        async () => {
          clock += 400;
          throw new StepError("slow", { httpStatus: 503 });
        },
        { deadlineMs: 1500, now: () => clock },
      ),
      StepFailedError,
    );
    assert.deepEqual(script.requests[0]?.deadline, { seconds: 1, nanos: 100_000_000 });
  });

  test("without an upstream the pod is never asked to admit nor told of a success", async () => {
    for (const upstream of [undefined, ""]) {
      const script = new Script([RETRY(1)]);
      let calls = 0;
      const step = async (): Promise<string> => {
        calls += 1;
        if (calls === 1) throw new StepError("busy", { httpStatus: 503 });
        return "ok";
      };
      assert.equal(await runStep(script, 0, step, { sleep: recordingSleep().sleep, capability: "search", upstream }), "ok");
      assert.deepEqual([script.admits, script.reports], [[], []]);
    }
  });

  test("with an upstream, a report that fails leaves the step's result standing", async () => {
    const script = new Script([]);
    const source: DecisionSource = {
      fallbackProfile: script.fallbackProfile,
      decideRetry: (input) => script.decideRetry(input),
      admit: (input) => script.admit(input),
      reportOutcome: () => Promise.reject(new Error("the pod is gone")),
    };
    assert.equal(await runStep(source, 0, async () => "ok", { upstream: "amadeus" }), "ok");
    assert.deepEqual(script.admits, [{ upstream: "amadeus", capability: "", profile: "" }]);
  });

  test("budgets are sent when set, 0 included, and left unset otherwise", async () => {
    const unset = new Script([FAIL]);
    await assert.rejects(runStep(unset, 0, busy), StepFailedError);
    assert.equal(unset.requests[0]?.maxAttempts, undefined);
    assert.equal(unset.requests[0]?.maxValidationRetries, undefined);
    const none = new Script([FAIL]);
    await assert.rejects(runStep(none, 0, busy, { maxAttempts: 1, maxValidationRetries: 0 }), StepFailedError);
    assert.equal(none.requests[0]?.maxAttempts, 1);
    assert.equal(none.requests[0]?.maxValidationRetries, 0);
  });

  const badOptions: Array<[string, object, string]> = [
    ["maxAttempts 0", { maxAttempts: 0 }, "max_attempts"],
    ["maxAttempts 1.5", { maxAttempts: 1.5 }, "max_attempts"],
    ["maxAttempts 2^31", { maxAttempts: 2 ** 31 }, "max_attempts"],
    ["maxValidationRetries -1", { maxValidationRetries: -1 }, "max_validation_retries"],
    ["deadlineMs NaN", { deadlineMs: Number.NaN }, "deadline"],
    ["deadlineMs -1", { deadlineMs: -1 }, "deadline"],
    ["a numeric upstream", { upstream: 7 }, "upstream"],
    ["a numeric capability", { capability: 7 }, "capability"],
    ["cost -1", { upstream: "llm", cost: -1 }, "cost"],
    ["cost NaN", { upstream: "llm", cost: Number.NaN }, "cost"],
    ["cost Infinity", { upstream: "llm", cost: Number.POSITIVE_INFINITY }, "cost"],
    ["cost over 1e9", { upstream: "llm", cost: 1e9 + 1 }, "cost"],
    ["a string cost", { upstream: "llm", cost: "7" }, "cost"],
    ["a criticality by its short name", { criticality: "SHEDDABLE" }, "criticality"],
    ["a numeric criticality", { criticality: 4 }, "criticality"],
    ["criticality UNRECOGNIZED", { criticality: Criticality.UNRECOGNIZED }, "criticality"],
    ["a numeric fairnessKey", { upstream: "llm", fairnessKey: 7 }, "fairness_key"],
    ["a fairnessKey over 256 characters", { upstream: "llm", fairnessKey: "k".repeat(257) }, "fairness_key"],
    ["a fairnessKey with a lone surrogate", { upstream: "llm", fairnessKey: "a\uD800" }, "fairness_key"],
    ["fairnessWeight -1", { upstream: "llm", fairnessWeight: -1 }, "fairness_weight"],
    ["fairnessWeight NaN", { upstream: "llm", fairnessWeight: Number.NaN }, "fairness_weight"],
    ["fairnessWeight Infinity", { upstream: "llm", fairnessWeight: Number.POSITIVE_INFINITY }, "fairness_weight"],
    ["fairnessWeight over 100", { upstream: "llm", fairnessWeight: 100.5 }, "fairness_weight"],
    ["a string fairnessWeight", { upstream: "llm", fairnessWeight: "3" }, "fairness_weight"],
  ];
  for (const [name, options, field] of badOptions) {
    test(`${name} is refused before the step runs, naming ${field}`, async () => {
      let ran = false;
      await assert.rejects(
        runStep(new Script([]), 0, async () => void (ran = true), options),
        (e: unknown) => e instanceof SquawkInputError && e.field === field,
      );
      assert.equal(ran, false);
    });
  }

  test("a body over the profile's limit is sent cut to the limit", async () => {
    const script = new Script([FAIL]);
    const body = "x".repeat(DEFAULT_FALLBACK_PROFILE.maxBodyBytes + 10);
    await assert.rejects(
      runStep(script, 0, () => Promise.reject(new StepError("big", { httpStatus: 500, body }))),
      StepFailedError,
    );
    assert.equal((script.requests[0]?.responseBody as Uint8Array).length, DEFAULT_FALLBACK_PROFILE.maxBodyBytes);
  });

  test("StepError.fromResponse reads status, headers and body", async () => {
    const response = new Response(JSON.stringify({ success: false, error: { retryable: false } }), {
      status: 503,
      headers: { "Retry-After": "2" },
    });
    const error = await StepError.fromResponse(response);
    assert.equal(error.httpStatus, 503);
    assert.equal(error.headers["retry-after"], "2");
    assert.match(new TextDecoder().decode(error.body as Uint8Array), /"retryable":false/);
  });
});

describe("runStep and the pacer", () => {
  const SATURATED = Reason.REASON_UPSTREAM_SATURATED;
  const waitOf = (ms: number): Partial<Admission> => ({ wait: durationFromMs(ms) });
  const saturatedWith = (calls: number, retryAfterMs: number | undefined) => (e: unknown) =>
    e instanceof StepFailedError &&
    e.decision.action === Action.ACTION_FAIL &&
    e.decision.reason === SATURATED &&
    e.calls === calls &&
    (retryAfterMs === undefined
      ? e.decision.retryAfter === undefined
      : e.decision.retryAfter !== undefined && durationToMs(e.decision.retryAfter) === retryAfterMs);

  test("the deadline sent with Admit is the step's time left, capped at the day Admit accepts", async () => {
    let clock = 0;
    const script = new Script([RETRY(0)]);
    let calls = 0;
    const step = async (): Promise<string> => {
      calls += 1;
      clock += 400;
      if (calls === 1) throw new StepError("busy", { httpStatus: 503 });
      return "ok";
    };
    await runStep(script, 0, step, { upstream: "llm", deadlineMs: 1500, now: () => clock });
    assert.deepEqual(
      script.admits.map((a) => a.deadline),
      [durationFromMs(1500), durationFromMs(1100)],
    );
    const long = new Script([]);
    await runStep(long, 0, async () => "ok", { upstream: "llm", deadlineMs: 3 * 86_400_000 });
    assert.deepEqual(long.admits[0]?.deadline, { seconds: 86_400, nanos: 0 });
  });

  test("a paced start is slept in whole ms, rounded up, before the one dispatch", async () => {
    const script = new Script([], [waitOf(12.3)]);
    const { sleep, waits } = recordingSleep();
    const events: string[] = [];
    await runStep(script, 0, async () => void events.push(`dispatch after ${waits.length} wait(s)`), { upstream: "llm", sleep });
    assert.deepEqual(waits, [13]);
    assert.deepEqual(events, ["dispatch after 1 wait(s)"]);
    assert.equal(script.admits.length, 1);
  });

  test("a paced start past the deadline ends the step unslept, saying when a call could start", async () => {
    const script = new Script([], [waitOf(2000)]);
    const { sleep, waits } = recordingSleep();
    await assert.rejects(
      runStep(script, 0, async () => assert.fail("dispatched"), { upstream: "llm", deadlineMs: 1999, now: () => 0, sleep }),
      saturatedWith(0, 2000),
    );
    assert.deepEqual([waits, script.reports], [[], []]);
  });

  test("a saturated refusal ends the step at once, even with a retry_after inside the deadline", async () => {
    const refusal = { allowed: false, reason: SATURATED, retryAfter: durationFromMs(300), permits: 0 };
    const script = new Script([], [refusal]);
    const { sleep, waits } = recordingSleep();
    await assert.rejects(
      runStep(script, 0, async () => assert.fail("dispatched"), { upstream: "llm", deadlineMs: 10_000, sleep }),
      saturatedWith(0, 300),
    );
    assert.deepEqual([waits, script.requests, script.admits.length], [[], [], 1]);
  });

  test("a shed step quotes the daemon's explanation of the limit that shed it, bounded", async () => {
    const said = "The call would wait 1.05 s for the pace of 20/s (declared in the policy), past the queue's limit of 1 s (rate_limit.max_queue_delay).";
    const explained = { allowed: false, reason: SATURATED, retryAfter: durationFromMs(300), permits: 0, explanation: said };
    await assert.rejects(
      runStep(new Script([], [explained]), 0, async () => assert.fail("dispatched"), { upstream: "llm", deadlineMs: 60_000 }),
      (e: unknown) => e instanceof StepFailedError && e.decision.explanation === `The pod shed the dispatch to llm: ${SATURATED}. ${said}`,
    );
    const long = { ...explained, explanation: "é".repeat(2000) };
    await assert.rejects(
      runStep(new Script([], [long]), 0, async () => assert.fail("dispatched"), { upstream: "llm" }),
      (e: unknown) => e instanceof StepFailedError && e.decision.explanation.endsWith(`. ${"é".repeat(512)}`),
    );
    // An older daemon sends none: the step's deadline is not blamed alone.
    const older = { ...explained, explanation: "" };
    await assert.rejects(
      runStep(new Script([], [older]), 0, async () => assert.fail("dispatched"), { upstream: "llm" }),
      (e: unknown) => e instanceof StepFailedError && e.decision.explanation.includes("the step's deadline or the queue's limit"),
    );
  });

  test("each refusal of the pod's carries its decision id; a paced start past the deadline, the runner's own, none", async () => {
    const id = "3fa2c1-17";
    const refusedOn = async (admission: Partial<Admission>, options: { deadlineMs?: number; maxAttempts?: number } = {}) => {
      const { sleep } = recordingSleep();
      const run = runStep(new Script([], [admission, admission, admission]), 0, async () => assert.fail("dispatched"), {
        upstream: "llm",
        sleep,
        ...options,
      });
      const error = await run.then(
        () => assert.fail("resolved"),
        (e: unknown) => e,
      );
      assert.ok(error instanceof StepFailedError, String(error));
      assert.equal(error.decision.action, Action.ACTION_FAIL);
      return error.decision.decisionId;
    };
    const open = { allowed: false, reason: Reason.REASON_CIRCUIT_OPEN, retryAfter: durationFromMs(60_000), permits: 0, decisionId: id };
    // Shed at once; the breaker's retry_after past the deadline; refusals past the attempt budget.
    assert.equal(await refusedOn({ ...open, reason: SATURATED }), id);
    assert.equal(await refusedOn(open, { deadlineMs: 1000 }), id);
    const cooling = { ...open, reason: Reason.REASON_UPSTREAM_COOLING_DOWN, retryAfter: durationFromMs(10) };
    assert.equal(await refusedOn(cooling, { maxAttempts: 2 }), id);
    // An allowed answer paced past the deadline: the daemon refused nothing.
    assert.equal(await refusedOn({ wait: durationFromMs(2000), decisionId: id }, { deadlineMs: 1000 }), "");
    // A stand-in's id is bounded as the client bounds the daemon's.
    assert.equal(await refusedOn({ ...open, decisionId: "x".repeat(65) }, { deadlineMs: 1000 }), "");
  });

  test("a hostile wait is never a stall: a day away without a deadline sheds, a negative one starts now", async () => {
    const far = new Script([], [waitOf(86_400_001)]);
    const { sleep, waits } = recordingSleep();
    await assert.rejects(
      runStep(far, 0, async () => assert.fail("dispatched"), { upstream: "llm", sleep }),
      saturatedWith(0, 86_400_001),
    );
    assert.deepEqual(waits, []);
    const negative = new Script([], [{ wait: { seconds: -5, nanos: 0 } }]);
    assert.equal(await runStep(negative, 0, async () => "ok", { upstream: "llm", sleep }), "ok");
    assert.deepEqual(waits, []);
  });

  test("an abort during the paced wait rejects with the signal's reason and never dispatches", async () => {
    const controller = new AbortController();
    const script = new Script([], [waitOf(60_000)]);
    const run = runStep(script, 0, async () => assert.fail("dispatched"), {
      upstream: "llm",
      signal: controller.signal,
      // A seam that ignores the signal: the runner itself must cut the wait.
      sleep: () => new Promise<void>(() => undefined),
    });
    controller.abort(new Error("caller gave up"));
    await assert.rejects(run, /caller gave up/);
  });

  test("the estimated cost goes with every Admit and the success; costOf reports the real one", async () => {
    const script = new Script([RETRY(0)]);
    let calls = 0;
    const step = async (): Promise<{ tokens: number }> => {
      calls += 1;
      if (calls === 1) throw new StepError("busy", { httpStatus: 503 });
      return { tokens: 1234 };
    };
    await runStep(script, 0, step, { upstream: "llm", cost: 1500, costOf: (r) => r.tokens });
    assert.deepEqual(
      script.admits.map((a) => a.cost),
      [1500, 1500],
    );
    assert.deepEqual(
      script.reports.map((r) => r.outcomes[0]?.cost),
      [1234],
    );
  });

  for (const [name, costOf] of [
    ["NaN", () => Number.NaN],
    ["negative", () => -1],
    ["a throw", () => {
      throw new Error("no usage in the answer");
    }],
  ] as const) {
    test(`a costOf answering ${name} reports the estimate, and the result stands`, async () => {
      const script = new Script([]);
      assert.equal(await runStep(script, 0, async () => "ok", { upstream: "llm", cost: 10, costOf }), "ok");
      assert.equal(script.reports[0]?.outcomes[0]?.cost, 10);
    });
  }

  test("no cost set sends none and reports 0 (unknown)", async () => {
    const script = new Script([]);
    await runStep(script, 0, async () => "ok", { upstream: "llm" });
    assert.equal(script.admits[0]?.cost, undefined);
    assert.equal(script.reports[0]?.outcomes[0]?.cost, 0);
  });
});

describe("runStep's criticality", () => {
  const { CRITICALITY_CRITICAL, CRITICALITY_SHEDDABLE, CRITICALITY_SHEDDABLE_PLUS } = Criticality;
  /** Each Admit's upstream and criticality (undefined when none was sent). */
  const sent = (script: Script): Array<[string | undefined, Criticality | undefined]> =>
    script.admits.map((a) => [a.upstream, a.criticality]);

  test("goes with every Admit of the step, resends included", async () => {
    const script = new Script([RETRY(0)]);
    let calls = 0;
    const step = async (): Promise<string> => {
      calls += 1;
      if (calls === 1) throw new StepError("busy", { httpStatus: 503 });
      return "ok";
    };
    await runStep(script, 0, step, { upstream: "a", criticality: CRITICALITY_SHEDDABLE });
    assert.deepEqual(sent(script), [
      ["a", CRITICALITY_SHEDDABLE],
      ["a", CRITICALITY_SHEDDABLE],
    ]);
  });

  test("a step inherits the level of the step it runs in, across awaits, unless it names its own", async () => {
    const script = new Script([]);
    const seen = await runStep(
      script,
      0,
      async () => {
        await delay(1);
        await runStep(script, 0, async () => "ok", { upstream: "b" });
        const levelAfterAwait = async (): Promise<Criticality | undefined> => {
          await delay(1);
          return criticality();
        };
        const own = await runStep(script, 0, levelAfterAwait, { upstream: "c", criticality: CRITICALITY_CRITICAL });
        assert.equal(own, CRITICALITY_CRITICAL);
        // Unnamed counts as unset: inherited too.
        await runStep(script, 0, async () => "ok", { upstream: "d", criticality: Criticality.CRITICALITY_UNSPECIFIED });
        await delay(1);
        return criticality();
      },
      { upstream: "a", criticality: CRITICALITY_SHEDDABLE },
    );
    assert.equal(seen, CRITICALITY_SHEDDABLE);
    assert.equal(criticality(), undefined, "outside every step again");
    await runStep(script, 0, async () => "ok", { upstream: "e" });
    assert.deepEqual(sent(script), [
      ["a", CRITICALITY_SHEDDABLE],
      ["b", CRITICALITY_SHEDDABLE],
      ["c", CRITICALITY_CRITICAL],
      ["d", CRITICALITY_SHEDDABLE],
      ["e", undefined],
    ]);
    assert.ok(!("criticality" in (script.admits[4] ?? {})), "none named, none sent");
  });

  test("a step without an upstream still passes its level on; concurrent steps keep their own", async () => {
    const script = new Script([]);
    const nested = (upstream: string) => async (): Promise<Criticality | undefined> => {
      await delay(1);
      await runStep(script, 0, async () => "ok", { upstream });
      return criticality();
    };
    const levels = await Promise.all([
      runStep(script, 0, nested("x"), { criticality: CRITICALITY_SHEDDABLE }),
      runStep(script, 0, nested("y"), { criticality: CRITICALITY_SHEDDABLE_PLUS }),
      runStep(script, 0, nested("z")),
    ]);
    assert.deepEqual(levels, [CRITICALITY_SHEDDABLE, CRITICALITY_SHEDDABLE_PLUS, undefined]);
    assert.deepEqual(
      sent(script).sort(([a], [b]) => String(a).localeCompare(String(b))),
      [
        ["x", CRITICALITY_SHEDDABLE],
        ["y", CRITICALITY_SHEDDABLE_PLUS],
        ["z", undefined],
      ],
    );
  });
});

describe("runStep's fairness key and weight", () => {
  /** Each Admit's upstream, fairness key and weight (undefined when not sent). */
  const sent = (script: Script): Array<[string | undefined, string | undefined, number | undefined]> =>
    script.admits.map((a) => [a.upstream, a.fairnessKey, a.fairnessWeight]);

  test("go with every Admit of the step, resends included", async () => {
    const script = new Script([RETRY(0)]);
    let calls = 0;
    const step = async (): Promise<string> => {
      calls += 1;
      if (calls === 1) throw new StepError("busy", { httpStatus: 503 });
      return "ok";
    };
    await runStep(script, 0, step, { upstream: "a", fairnessKey: "tenant-a", fairnessWeight: 3 });
    assert.deepEqual(sent(script), [
      ["a", "tenant-a", 3],
      ["a", "tenant-a", 3],
    ]);
  });

  test("a key of 256 characters (code points) and a weight of 100 are sent; unset, \"\" and 0 are not", async () => {
    const script = new Script([]);
    const key = "\u{1F600}".repeat(256);
    await runStep(script, 0, async () => "ok", { upstream: "a", fairnessKey: key, fairnessWeight: 100 });
    await runStep(script, 0, async () => "ok", { upstream: "b", fairnessKey: "", fairnessWeight: 0 });
    await runStep(script, 0, async () => "ok", { upstream: "c" });
    assert.deepEqual(sent(script), [
      ["a", key, 100],
      ["b", undefined, undefined],
      ["c", undefined, undefined],
    ]);
    for (const admit of script.admits.slice(1)) {
      assert.ok(!("fairnessKey" in admit) && !("fairnessWeight" in admit), "none named, none sent");
    }
  });

  test("a nested step does not inherit them", async () => {
    const script = new Script([]);
    await runStep(
      script,
      0,
      async () => {
        await runStep(script, 0, async () => "ok", { upstream: "b" });
        return runStep(script, 0, async () => "ok", { upstream: "c", fairnessKey: "tenant-c" });
      },
      { upstream: "a", fairnessKey: "tenant-a", fairnessWeight: 2 },
    );
    assert.deepEqual(sent(script), [
      ["a", "tenant-a", 2],
      ["b", undefined, undefined],
      ["c", "tenant-c", undefined],
    ]);
  });
});
