// Batched success reports (SquawkClientOptions.batchOutcomes) against a
// loopback server that records every ReportOutcome: how many RPCs a busy
// executor costs the daemon, and that nothing queued is lost on close.
import assert from "node:assert/strict";
import { afterEach, describe, test, type TestContext } from "node:test";
import { Server, ServerCredentials, status, type ServiceError, type UntypedServiceImplementation } from "@grpc/grpc-js";
import {
  AdmitResponse,
  BreakerState,
  OUTCOME_BATCH_DELAY_MS,
  OUTCOME_BATCH_SIZE,
  Reason,
  runStep,
  SquawkClient,
  SquawkInputError,
  type Outcome,
  type ReportOutcomeRequest,
} from "../src/index";
import { OUTCOME_BATCH_PATIENT_DELAY_MS } from "../src/client";
import { PolicyServiceService } from "../src/gen/squawk/v1/policy";

type Callback<T> = (error: Partial<ServiceError> | null, response?: T) => void;

/**
 * A server that admits everything (a probe when `probe`; with `grant`'s
 * fields over its answer), and records each ReportOutcome's outcomes.
 */
class Recorder {
  readonly reports: Outcome[][] = [];
  readonly server = new Server();
  probe = false;
  grant: Partial<AdmitResponse> = {};
  /** Resolved by the next report. */
  private waiting: (() => void) | undefined;

  async start(): Promise<string> {
    const impl: UntypedServiceImplementation = {};
    for (const method of Object.keys(PolicyServiceService)) {
      impl[method] = (_call: unknown, callback: Callback<never>) => callback({ code: status.UNIMPLEMENTED });
    }
    impl["admit"] = (_call: unknown, callback: Callback<AdmitResponse>) =>
      callback(
        null,
        AdmitResponse.fromPartial({
          allowed: true,
          reason: Reason.REASON_ADMITTED,
          breakerState: this.probe ? BreakerState.BREAKER_STATE_HALF_OPEN : BreakerState.BREAKER_STATE_CLOSED,
          probe: this.probe,
          permits: 1,
          ...this.grant,
        }),
      );
    impl["reportOutcome"] = (call: { request: ReportOutcomeRequest }, callback: Callback<{ recorded: number }>) => {
      this.reports.push(call.request.outcomes);
      this.waiting?.();
      callback(null, { recorded: call.request.outcomes.length });
    };
    this.server.addService(PolicyServiceService, impl);
    const port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
    );
    return `127.0.0.1:${port}`;
  }

  /** Resolves at the next report; rejects after 10 s (only a report that never comes takes that long). */
  nextReport(): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no report within 10 s")), 10_000);
      this.waiting = () => {
        clearTimeout(timer);
        this.waiting = undefined;
        resolve();
      };
    });
  }
}

describe("batched success reports", () => {
  let recorder: Recorder;
  let client: SquawkClient | undefined;

  async function start(batchOutcomes: boolean): Promise<SquawkClient> {
    recorder = new Recorder();
    const target = await recorder.start();
    client = new SquawkClient(target, { callTimeoutMs: 5000, batchOutcomes });
    return client;
  }

  afterEach(async () => {
    await client?.close();
    recorder.server.forceShutdown();
  });

  const run = (c: SquawkClient, i: number): Promise<number> =>
    runStep(c, i, async (params) => params, { upstream: "llm", capability: `w${i % 4}`, cost: i });

  test("without batchOutcomes every success is one ReportOutcome, sent before the step returns", async () => {
    const c = await start(false);
    for (let i = 0; i < 3; i++) {
      await run(c, i);
      assert.equal(recorder.reports.length, i + 1);
    }
    assert.equal(c.queueOutcome({ upstream: "llm", success: true }), false);
  });

  test("with batchOutcomes, many steps' successes go in one report, in order, sent on close", async () => {
    const c = await start(true);
    await Promise.all([0, 1, 2, 3, 4].map((i) => run(c, i)));
    assert.equal(recorder.reports.length, 0, "nothing is sent while the batch fills");
    await c.close();
    assert.equal(recorder.reports.length, 1);
    const batch = recorder.reports[0] ?? [];
    assert.deepEqual(
      batch.map((o) => [o.upstream, o.capability, o.success, o.cost]),
      [0, 1, 2, 3, 4].map((i) => ["llm", `w${i % 4}`, true, i]),
    );
    assert.ok(batch.every((o) => o.latency !== undefined));
    assert.throws(() => c.queueOutcome({ upstream: "llm", success: true }), /closed/);
  });

  test("each queued outcome goes with its age: the time since it was queued", async () => {
    recorder = new Recorder();
    const target = await recorder.start();
    const clock = { ms: 1_000_000 };
    const c = (client = new SquawkClient(target, { callTimeoutMs: 5000, batchOutcomes: true, now: () => clock.ms }));
    c.queueOutcome({ upstream: "llm", success: true });
    clock.ms += 30;
    c.queueOutcome({ upstream: "llm", success: true });
    clock.ms += 20;
    await c.flush();
    const ages = (recorder.reports[0] ?? []).map((o) => o.age);
    assert.deepEqual(ages, [
      { seconds: 0, nanos: 50_000_000 },
      { seconds: 0, nanos: 20_000_000 },
    ]);
  });

  test("a full batch is sent at once, and the rest after the batch delay without a flush", async () => {
    const c = await start(true);
    const full = recorder.nextReport();
    for (let i = 0; i < OUTCOME_BATCH_SIZE + 1; i++) assert.equal(c.queueOutcome({ upstream: "llm", success: true }), true);
    await full;
    assert.deepEqual(
      recorder.reports.map((r) => r.length),
      [OUTCOME_BATCH_SIZE],
    );
    // The one left over is sent by the timer: no flush, no close.
    await recorder.nextReport();
    assert.deepEqual(
      recorder.reports.map((r) => r.length),
      [OUTCOME_BATCH_SIZE, 1],
    );
  });

  test("a patient success waits a lease for its batch; an outcome behind it that is not brings the batch back", async (t: TestContext) => {
    recorder = new Recorder();
    const target = await recorder.start();
    const clock = { ms: 1_000_000 };
    const c = (client = new SquawkClient(target, { callTimeoutMs: 5000, batchOutcomes: true, now: () => clock.ms }));
    // The batch timer on a clock the test moves: each send is counted when it starts.
    const sends = t.mock.method(c as unknown as { sendQueued(): void }, "sendQueued");
    t.mock.timers.enable({ apis: ["setTimeout"] });
    const advance = (ms: number): void => {
      clock.ms += ms;
      t.mock.timers.tick(ms);
    };
    const patient = { upstream: "llm", success: true, cost: 1 };
    const impatient = { upstream: "llm", success: true, cost: 2 };

    c.queueOutcome(patient, { patient: true });
    advance(OUTCOME_BATCH_DELAY_MS);
    assert.equal(sends.mock.callCount(), 0, "a patient outcome alone is not sent after 50 ms");
    advance(OUTCOME_BATCH_PATIENT_DELAY_MS - OUTCOME_BATCH_DELAY_MS - 1);
    assert.equal(sends.mock.callCount(), 0);
    advance(1);
    assert.equal(sends.mock.callCount(), 1, "it is sent 200 ms after it was queued");

    // An impatient outcome queued 100 ms after a patient one: the batch is due 50 ms after it.
    c.queueOutcome(patient, { patient: true });
    advance(100);
    c.queueOutcome(impatient);
    advance(OUTCOME_BATCH_DELAY_MS - 1);
    assert.equal(sends.mock.callCount(), 1);
    advance(1);
    assert.equal(sends.mock.callCount(), 2, "sent at 150 ms, not 200");

    // A patient outcome behind an impatient one does not hold the batch back.
    c.queueOutcome(impatient);
    advance(10);
    c.queueOutcome(patient, { patient: true });
    advance(OUTCOME_BATCH_DELAY_MS - 10);
    assert.equal(sends.mock.callCount(), 3, "sent 50 ms after the impatient one");
    advance(OUTCOME_BATCH_PATIENT_DELAY_MS);
    assert.equal(sends.mock.callCount(), 3, "and no timer was left behind");

    t.mock.timers.reset();
    await c.flush();
    assert.deepEqual(
      recorder.reports.map((r) => r.map((o) => o.cost)),
      [[1], [1, 2], [2, 1]],
    );
  });

  test("an urgent outcome sends its batch when queued, with what it holds; the next is held again", async (t: TestContext) => {
    recorder = new Recorder();
    const target = await recorder.start();
    const clock = { ms: 1_000_000 };
    const c = (client = new SquawkClient(target, { callTimeoutMs: 5000, batchOutcomes: true, now: () => clock.ms }));
    const sends = t.mock.method(c as unknown as { sendQueued(): void }, "sendQueued");
    t.mock.timers.enable({ apis: ["setTimeout"] });
    const advance = (ms: number): void => {
      clock.ms += ms;
      t.mock.timers.tick(ms);
    };

    c.queueOutcome({ upstream: "llm", success: true, cost: 1 }, { patient: true });
    advance(10);
    c.queueOutcome({ upstream: "llm", success: true, cost: 2 });
    advance(10);
    assert.equal(c.queueOutcome({ upstream: "llm", success: true, cost: 3 }, { urgent: true }), true);
    assert.equal(sends.mock.callCount(), 1, "sent when the urgent outcome is queued");
    advance(OUTCOME_BATCH_PATIENT_DELAY_MS);
    assert.equal(sends.mock.callCount(), 1, "and no timer was left behind");

    c.queueOutcome({ upstream: "llm", success: true, cost: 4 });
    advance(OUTCOME_BATCH_DELAY_MS - 1);
    assert.equal(sends.mock.callCount(), 1, "the next outcome waits the batch delay");
    advance(1);
    assert.equal(sends.mock.callCount(), 2);

    t.mock.timers.reset();
    await c.flush();
    assert.deepEqual(
      recorder.reports.map((r) => r.map((o) => o.cost)),
      [[1, 2, 3], [4]],
    );
  });

  test("the success of a call holding a slot of a declared cap is sent as its step returns, naming its admission", async (t: TestContext) => {
    const c = await start(true);
    recorder.grant = { holdsSlot: true, admissionId: "00000000000000c7" };
    const sends = t.mock.method(c as unknown as { sendQueued(): void }, "sendQueued");
    const report = recorder.nextReport();
    await run(c, 7);
    assert.equal(sends.mock.callCount(), 1, "on its way before the batch delay");
    await report;
    assert.deepEqual(
      recorder.reports.map((r) => r.map((o) => [o.cost, o.admissionId])),
      [[[7, "00000000000000c7"]]],
    );
  });

  test("a half-open probe's success is reported at once, batching or not", async () => {
    const c = await start(true);
    recorder.probe = true;
    await run(c, 7);
    assert.deepEqual(
      recorder.reports.map((r) => r.map((o) => o.cost)),
      [[7]],
    );
  });

  test("an outcome that cannot be encoded is refused when queued, naming the field", async () => {
    const c = await start(true);
    assert.throws(
      () => c.queueOutcome({ upstream: "llm", httpStatus: 2 ** 31 }),
      (e: unknown) => e instanceof SquawkInputError && /http_status/.test(e.field),
    );
    assert.throws(
      () => c.queueOutcome({ upstream: "llm", latency: { seconds: 1.5, nanos: 0 } }),
      (e: unknown) => e instanceof SquawkInputError && /latency/.test(e.field),
    );
    await c.flush();
    assert.equal(recorder.reports.length, 0);
  });
});

test("with the daemon away a batch fails open: counted as a fallback, and close still ends", async () => {
  const recorder = new Recorder();
  const target = await recorder.start();
  recorder.server.forceShutdown();
  const c = new SquawkClient(target, { callTimeoutMs: 2000, batchOutcomes: true });
  assert.equal(await runStep(c, 1, async (p) => p, { upstream: "llm" }), 1);
  await c.close();
  assert.equal(c.fallbackCount, 2, "the fail-open admit and the batch");
});
