// runStep with an upstream, against the real daemon (built-in policy): the
// pod admits each dispatch and hears of each success; a cooling-down
// upstream holds the step back or, past its deadline, ends it at once.
// Then the same runner with the daemon unreachable: admission fails open.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Action,
  durationToMs,
  Reason,
  runStep,
  sleep,
  SquawkClient,
  StepError,
  StepFailedError,
  type Sleep,
} from "../src/index";
import { Daemon, freePort } from "./support/daemon";
import { logged, uniqueUpstream, type Asked } from "./support/upstreams";

/** A sleep seam that records each wait and returns at once. */
function instant(): { sleep: Sleep; waits: number[] } {
  const waits: number[] = [];
  return { waits, sleep: async (ms) => void waits.push(ms) };
}

const refusedWith = (reason: Reason, explanation: RegExp, calls: number) => (e: unknown) =>
  e instanceof StepFailedError &&
  e.decision.action === Action.ACTION_FAIL &&
  e.decision.reason === reason &&
  durationToMs(e.decision.delay ?? { seconds: -1, nanos: 0 }) === 0 &&
  e.decision.consumesAttempt &&
  explanation.test(e.decision.explanation) &&
  e.calls === calls;

const COOLING = Reason.REASON_UPSTREAM_COOLING_DOWN;
const escaped = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

describe("runStep with an upstream, against the daemon", () => {
  let daemon: Daemon;
  let client: SquawkClient;

  before(async () => {
    daemon = await Daemon.start();
    // A generous deadline keeps a busy machine from failing these calls open.
    client = new SquawkClient(daemon.target, { callTimeoutMs: 5000 });
  });
  after(async () => {
    client.close();
    await daemon.stop();
  });

  /** An executor in the pod got a 429 from `upstream` that says to wait `seconds`. */
  async function rateLimited(upstream: string, seconds: number): Promise<void> {
    const d = await client.decideRetry({ attempt: 1, httpStatus: 429, headers: { "Retry-After": String(seconds) }, upstream });
    assert.equal(d.action, Action.ACTION_RETRY);
  }

  test("every dispatch is admitted first, and the success is reported with the step's latency", async () => {
    const upstream = uniqueUpstream("admitted");
    const asked: Asked = { events: [], reports: [] };
    const { sleep: seam, waits } = instant();
    const result = await runStep(
      logged(client, asked),
      { city: "PAR" },
      async (_params, { attempt }) => {
        asked.events.push("dispatch");
        if (attempt === 1) throw new StepError("busy", { httpStatus: 503 });
        await sleep(40);
        return "ok";
      },
      { upstream, capability: "search_hotels", sleep: seam },
    );
    assert.equal(result, "ok");
    assert.deepEqual(asked.events, [
      "admit allowed",
      "dispatch",
      "decide ACTION_RETRY",
      "admit allowed",
      "dispatch",
      "report",
    ]);
    assert.deepEqual(waits, [542]);
    const [report] = asked.reports;
    assert.equal(report?.outcomes.length, 1);
    const outcome = report?.outcomes[0];
    assert.deepEqual([outcome?.upstream, outcome?.capability, outcome?.profile, outcome?.success], [upstream, "search_hotels", "", true]);
    const latencyMs = durationToMs({ seconds: outcome?.latency?.seconds ?? 0, nanos: outcome?.latency?.nanos ?? 0 });
    // Node's timers may fire a millisecond early by Date.now, so the 40 ms
    // dispatch is asked to show at least 30.
    assert.ok(latencyMs >= 30 && latencyMs < 5000, `latency ${latencyMs} ms`);
    // The failure came with DecideRetry, the success with the report.
    const state = (await client.getUpstreams()).find((u) => u.upstream === upstream);
    assert.equal(state?.windowCalls, 2);
    assert.equal(state?.windowFailures, 1);
    assert.equal(client.fallbackCount, 0);
  });

  test("a cooling-down upstream holds the first dispatch back until the pod admits it", async () => {
    const upstream = uniqueUpstream("cooling");
    await rateLimited(upstream, 2);
    const asked: Asked = { events: [], reports: [] };
    const waits: number[] = [];
    const result = await runStep(
      logged(client, asked),
      0,
      async () => {
        asked.events.push("dispatch");
        return "ok";
      },
      {
        upstream,
        sleep: async (ms, signal) => {
          waits.push(ms);
          asked.events.push("wait");
          await sleep(ms, signal);
        },
      },
    );
    assert.equal(result, "ok");
    const first = waits[0] ?? 0;
    // The pod jitters a cool-down's refusal by up to its time left (5 s at most).
    assert.ok(first >= 1000 && first <= 4000, `first wait ${first} ms`);
    // A timer may fire a hair early; the pod then asks for the rest, never for more.
    assert.ok(waits.reduce((a, b) => a + b, 0) <= 4050, `waits ${waits.join(", ")}`);
    const refusals = asked.events.slice(0, -3);
    assert.deepEqual(refusals, waits.flatMap(() => [`admit ${COOLING}`, "wait"]));
    assert.deepEqual(asked.events.slice(-3), ["admit allowed", "dispatch", "report"]);
  });

  test("a cool-down longer than the deadline left ends the step at once, never calling it", async () => {
    const upstream = uniqueUpstream("deadline");
    await rateLimited(upstream, 2);
    const { sleep: seam, waits } = instant();
    let ran = false;
    const started = Date.now();
    const failure = await runStep(client, 0, async () => void (ran = true), { upstream, deadlineMs: 1000, sleep: seam }).then(
      () => assert.fail("the step ran"),
      (e: unknown) => e,
    );
    const explanation = new RegExp(
      `^The pod refused the dispatch to ${escaped(upstream)}: ${COOLING}; it admits again in (\\d+) ms, past the step's deadline\\.$`,
    );
    assert.ok(refusedWith(COOLING, explanation, 0)(failure), String(failure));
    const waitMs = Number(explanation.exec((failure as StepFailedError).decision.explanation)?.[1]);
    assert.ok(waitMs > 1000 && waitMs <= 4000, `admits again in ${waitMs} ms`); // jittered
    assert.equal(ran, false);
    assert.deepEqual(waits, []);
    assert.ok(Date.now() - started < 1000, "the step waited");
  });

  test("an open breaker past the deadline ends the step with CIRCUIT_OPEN", async () => {
    const upstream = uniqueUpstream("open");
    const failures = Array.from({ length: 10 }, () => ({ upstream, success: false, httpStatus: 503 }));
    assert.equal(await client.reportOutcome({ outcomes: failures }), 10);
    let ran = false;
    await assert.rejects(
      runStep(client, 0, async () => void (ran = true), { upstream, deadlineMs: 5000 }),
      refusedWith(Reason.REASON_CIRCUIT_OPEN, /^The pod refused the dispatch to .+: REASON_CIRCUIT_OPEN; it admits again in \d+ ms/, 0),
    );
    assert.equal(ran, false);
  });

  test("refusals in a row beyond the attempt budget end the step", async () => {
    const upstream = uniqueUpstream("refusals");
    await rateLimited(upstream, 30);
    const { sleep: seam, waits } = instant();
    let ran = false;
    await assert.rejects(
      runStep(client, 0, async () => void (ran = true), { upstream, maxAttempts: 2, sleep: seam }),
      refusedWith(COOLING, new RegExp(`^The pod refused the dispatch to ${escaped(upstream)} 3 times in a row: ${COOLING}\\.$`), 0),
    );
    assert.equal(ran, false);
    assert.equal(waits.length, 2);
    // The built-in breaker's 30 s, jittered by 5 s at most.
    assert.ok(waits.every((ms) => ms > 25_000 && ms <= 35_000), `waits ${waits.join(", ")}`);
  });

  test("a resend the pod refuses ends the step with the calls made and the last error", async () => {
    const upstream = uniqueUpstream("resend");
    const { sleep: seam, waits } = instant();
    const limited = new StepError("slow down", { httpStatus: 429, headers: { "Retry-After": "30" } });
    let calls = 0;
    await assert.rejects(
      runStep(
        client,
        0,
        async () => {
          calls += 1;
          throw limited;
        },
        { upstream, maxAttempts: 2, sleep: seam },
      ),
      (e: unknown) => refusedWith(COOLING, / 3 times in a row: /, 1)(e) && (e as StepFailedError).cause === limited,
    );
    assert.equal(calls, 1);
    // The decided resend waits the Retry-After, then two refusals are waited out.
    assert.equal(waits.length, 3);
    assert.equal(waits[0], 30_000);
  });

  test("an abort during a refusal's wait rejects at once with the signal's reason", async () => {
    const upstream = uniqueUpstream("abort");
    await rateLimited(upstream, 30);
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("stop")), 50);
    let ran = false;
    const started = Date.now();
    await assert.rejects(runStep(client, 0, async () => void (ran = true), { upstream, signal: controller.signal }), /stop/);
    assert.equal(ran, false);
    assert.ok(Date.now() - started < 5000);
  });
});

describe("runStep with an upstream, without the daemon", () => {
  test("admission fails open and the step still runs", async () => {
    const client = new SquawkClient(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 500 });
    try {
      let calls = 0;
      const result = await runStep(client, 0, async () => {
        calls += 1;
        return "ok";
      }, { upstream: "amadeus", capability: "search_hotels" });
      assert.equal(result, "ok");
      assert.equal(calls, 1);
      // The admission and the success's report, both answered by the client.
      assert.equal(client.fallbackCount, 2);
      const admission = await client.admit({ upstream: "amadeus" });
      assert.deepEqual([admission.allowed, admission.fallback], [true, true]);
    } finally {
      client.close();
    }
  });
});
