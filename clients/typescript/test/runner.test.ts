// runStep with a scripted decision source.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  Action,
  durationFromMs,
  Reason,
  runStep,
  StepError,
  StepFailedError,
  type Decision,
  type DecideRetryInput,
  type DecisionSource,
  type ErrorVerdict,
  type Sleep,
} from "../src/index";

function decision(action: Action, reason: Reason, delayMs = 0, consumesAttempt = action !== Action.ACTION_CORRECT): Decision {
  return {
    action,
    reason,
    delay: durationFromMs(delayMs),
    explanation: `${Action[action]} ${Reason[reason]}`,
    consumesAttempt,
    classification: undefined,
    fallback: false,
  };
}
const RETRY = (ms = 100): Decision => decision(Action.ACTION_RETRY, Reason.REASON_TRANSIENT_STATUS, ms);
const CORRECT = decision(Action.ACTION_CORRECT, Reason.REASON_CORRECTION_ELIGIBLE);
const FAIL = decision(Action.ACTION_FAIL, Reason.REASON_NO_CORRECTION_AVAILABLE);
const CANCELLED = decision(Action.ACTION_FAIL, Reason.REASON_CANCELLED);

/** Answers with the scripted decisions in turn, and records every request. */
class Script implements DecisionSource {
  readonly requests: DecideRetryInput[] = [];
  constructor(private readonly answers: Decision[]) {}
  async decideRetry(input: DecideRetryInput): Promise<Decision> {
    this.requests.push(input);
    if (input.cancelled) return CANCELLED;
    const next = this.answers.shift();
    assert.ok(next, "the runner asked more often than scripted");
    return next;
  }
}

function recordingSleep(): { sleep: Sleep; waits: number[] } {
  const waits: number[] = [];
  return { waits, sleep: async (ms) => void waits.push(ms) };
}

describe("runStep", () => {
  test("retries after the decision's delay, then succeeds", async () => {
    const script = new Script([RETRY(542), RETRY(1091)]);
    const { sleep, waits } = recordingSleep();
    const seen: number[] = [];
    const result = await runStep(
      script,
      async (params: { city: string }, ctx) => {
        seen.push(ctx.attempt);
        if (ctx.attempt < 3) {
          throw new StepError("busy", { httpStatus: 503, headers: { "Retry-After": "1" }, body: "<html>busy</html>" });
        }
        return `ok ${params.city}`;
      },
      { params: { city: "PAR" }, sleep, maxAttempts: 5 },
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
    assert.equal(script.requests[0]?.responseBody, "<html>busy</html>");
  });

  test("any other thrown error is a transport failure", async () => {
    const script = new Script([RETRY(5)]);
    let calls = 0;
    const out = await runStep(
      script,
      async () => {
        calls += 1;
        if (calls === 1) throw new TypeError("fetch failed");
        return 42;
      },
      { params: null, sleep: recordingSleep().sleep },
    );
    assert.equal(out, 42);
    assert.equal(script.requests[0]?.transportFailure, true);
    assert.equal(script.requests[0]?.httpStatus, 0);
  });

  test("CORRECT calls the hook, resends its parameters and keeps the attempt number", async () => {
    const script = new Script([CORRECT]);
    const tried: Array<[string, number, number]> = [];
    const hook: Array<{ params: string; used: number }> = [];
    const out = await runStep(
      script,
      async (city: string, ctx) => {
        tried.push([city, ctx.attempt, ctx.validationRetriesUsed]);
        if (city !== "PAR") throw new StepError("error 400: INVALID CITY CODE", { httpStatus: 400 });
        return city;
      },
      {
        params: "Paris",
        correct: (info) => {
          hook.push({ params: info.params, used: info.validationRetriesUsed });
          assert.equal(info.decision.action, Action.ACTION_CORRECT);
          return "PAR";
        },
      },
    );
    assert.equal(out, "PAR");
    assert.deepEqual(tried, [
      ["Paris", 1, 0],
      ["PAR", 1, 1],
    ]);
    assert.deepEqual(hook, [{ params: "Paris", used: 0 }]);
    assert.equal(script.requests[0]?.correctionAvailable, true);
  });

  test("a correction hook with nothing to offer ends the step", async () => {
    const script = new Script([CORRECT]);
    await assert.rejects(
      runStep(script, async () => Promise.reject(new StepError("bad", { httpStatus: 422 })), {
        params: 1,
        correct: () => undefined,
      }),
      (e: unknown) => e instanceof StepFailedError && e.decision.action === Action.ACTION_CORRECT,
    );
  });

  test("FAIL rethrows the last error wrapped with the decision", async () => {
    const script = new Script([RETRY(1), FAIL]);
    const errors: StepError[] = [];
    await assert.rejects(
      runStep(
        script,
        async (_p: number, ctx) => {
          const error = new StepError(`try ${ctx.attempt}`, { httpStatus: ctx.attempt === 1 ? 503 : 400 });
          errors.push(error);
          throw error;
        },
        { params: 0, sleep: recordingSleep().sleep },
      ),
      (e: unknown) => {
        assert.ok(e instanceof StepFailedError);
        assert.equal(e.decision, FAIL);
        assert.equal(e.cause, errors[1]);
        assert.equal(e.attempts, 2);
        assert.match(e.message, /REASON_NO_CORRECTION_AVAILABLE/);
        return true;
      },
    );
  });

  test("an abort during the wait stops at once and never retries", async () => {
    const script = new Script([RETRY(60_000)]);
    const controller = new AbortController();
    let calls = 0;
    const started = Date.now();
    const run = runStep(
      script,
      async () => {
        calls += 1;
        setTimeout(() => controller.abort(new Error("user cancelled")), 20);
        throw new StepError("busy", { httpStatus: 503 });
      },
      { params: 0, signal: controller.signal },
    );
    await assert.rejects(run, /user cancelled/);
    assert.ok(Date.now() - started < 1000, "the 60 s wait was cut short");
    assert.equal(calls, 1);
  });

  test("an abort is honoured even by a sleep seam that ignores the signal", async () => {
    const controller = new AbortController();
    const run = runStep(new Script([RETRY(10)]), async () => Promise.reject(new StepError("x", { httpStatus: 503 })), {
      params: 0,
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
        async () => {
          controller.abort();
          throw new StepError("aborted", { httpStatus: 503 });
        },
        { params: 0, signal: controller.signal, onError: () => "retry" },
      ),
      (e: unknown) => e instanceof StepFailedError && e.decision.reason === Reason.REASON_CANCELLED,
    );
    assert.equal(script.requests[0]?.cancelled, true);
  });

  test("an already aborted signal never runs the step", async () => {
    let ran = false;
    await assert.rejects(
      runStep(new Script([]), async () => void (ran = true), { params: 0, signal: AbortSignal.abort(new Error("early")) }),
      /early/,
    );
    assert.equal(ran, false);
  });

  test("onError can turn a FAIL into a retry", async () => {
    const script = new Script([FAIL]);
    const { sleep, waits } = recordingSleep();
    const verdicts: ErrorVerdict[] = ["retry"];
    let calls = 0;
    const out = await runStep(
      script,
      async () => {
        calls += 1;
        if (calls === 1) throw new StepError("conflict", { httpStatus: 409 });
        return "second time lucky";
      },
      { params: 0, sleep, onError: () => verdicts.shift() },
    );
    assert.equal(out, "second time lucky");
    assert.equal(calls, 2);
    assert.deepEqual(waits, [542], "a forced retry of a FAIL waits the default backoff");
  });

  test("onError can turn a RETRY into a failure", async () => {
    const script = new Script([RETRY(100)]);
    const { sleep, waits } = recordingSleep();
    let calls = 0;
    await assert.rejects(
      runStep(
        script,
        async () => {
          calls += 1;
          throw new StepError("busy", { httpStatus: 503 });
        },
        { params: 0, sleep, onError: (info) => (info.decision.action === Action.ACTION_RETRY ? "fail" : undefined) },
      ),
      (e: unknown) => e instanceof StepFailedError && e.decision.action === Action.ACTION_RETRY,
    );
    assert.equal(calls, 1);
    assert.deepEqual(waits, []);
  });

  test("onError returning undefined follows the decision", async () => {
    const script = new Script([RETRY(3)]);
    const { sleep, waits } = recordingSleep();
    let calls = 0;
    await runStep(
      script,
      async () => {
        if (++calls === 1) throw new StepError("busy", { httpStatus: 429 });
      },
      { params: 0, sleep, onError: () => undefined },
    );
    assert.deepEqual(waits, [3]);
  });

  test("the step's deadline is sent as the time left", async () => {
    const script = new Script([FAIL]);
    let clock = 1000;
    await assert.rejects(
      runStep(
        script,
        async () => {
          clock += 400;
          throw new StepError("slow", { httpStatus: 503 });
        },
        { params: 0, deadlineMs: 1500, now: () => clock },
      ),
      StepFailedError,
    );
    assert.deepEqual(script.requests[0]?.deadline, { seconds: 1, nanos: 100_000_000 });
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
