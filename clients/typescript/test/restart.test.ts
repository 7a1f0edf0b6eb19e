// Kill the daemon mid-run: decisions come from the fallback; restart it on
// the same port: decisions come from the daemon again.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { backoffDelayMs } from "../src/backoff";
import { Action, durationToMs, runStep, SquawkClient, StepError, type Decision, type DecideRetryInput, type DecisionSource } from "../src/index";
import { Daemon } from "./support/daemon";

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

let daemon: Daemon | undefined;
after(async () => {
  await daemon?.stop();
});

test("SIGKILL the daemon mid-run, then restart it on the same port", { timeout: 60_000 }, async (t) => {
  daemon = await Daemon.start();
  const port = daemon.port;
  // A generous deadline keeps a busy CI machine from sending live calls to the fallback.
  const client = new SquawkClient(daemon.target, { callTimeoutMs: 2000 });
  type Phase = "up" | "killed" | "restarted" | "done";
  let phase: Phase = "up";
  const log: Array<{ phase: Phase; attempt: number; fallback: boolean; decision: Decision }> = [];
  const count = (p: Phase, fallback: boolean): number => log.filter((e) => e.phase === p && e.fallback === fallback).length;
  let restartedAt = 0;
  let reconnectMs = 0;

  const source: DecisionSource = {
    fallbackProfile: client.fallbackProfile,
    admit: (input, options) => client.admit(input, options),
    reportOutcome: (input, options) => client.reportOutcome(input, options),
    async decideRetry(input: DecideRetryInput): Promise<Decision> {
      const decision = await client.decideRetry(input);
      log.push({ phase, attempt: input.attempt ?? 0, fallback: decision.fallback, decision });
      return decision;
    },
  };

  try {
    const result = await runStep(
      source,
      undefined,
      async () => {
        if (phase === "done") return "finished";
        throw new StepError("service unavailable", { httpStatus: 503 });
      },
      {
        maxAttempts: 100_000,
        // The zero-sleep seam also drives the scenario between attempts.
        sleep: async () => {
          if (phase === "up" && count("up", false) >= 3) {
            await daemon?.kill();
            phase = "killed";
          } else if (phase === "killed" && count("killed", true) >= 3) {
            daemon = await Daemon.start(port);
            restartedAt = Date.now();
            phase = "restarted";
          } else if (phase === "restarted" && count("restarted", false) >= 3) {
            reconnectMs = Date.now() - restartedAt;
            phase = "done";
          }
          // Yield briefly so a waiting reconnect is not starved by a hot loop.
          if (phase === "restarted") await pause(10);
        },
      },
    );
    assert.equal(result, "finished");
  } finally {
    client.close();
  }

  const up = log.filter((e) => e.phase === "up");
  const killed = log.filter((e) => e.phase === "killed");
  const restarted = log.filter((e) => e.phase === "restarted");
  t.diagnostic(
    `decisions: ${up.length} live before the kill, ${killed.length} fallback while dead, ` +
      `${count("restarted", true)} fallback + ${count("restarted", false)} live after the restart; ` +
      `live again ${reconnectMs} ms after the restart`,
  );
  assert.ok(up.length >= 3 && up.every((e) => !e.fallback), "before the kill the daemon decides");
  assert.ok(killed.length >= 3 && killed.every((e) => e.fallback), "while the daemon is dead the fallback decides");
  assert.equal(count("restarted", false), 3, "after the restart the daemon decides again");
  // Once the daemon answers again, it keeps answering.
  const firstLive = restarted.findIndex((e) => !e.fallback);
  assert.ok(restarted.slice(firstLive).every((e) => !e.fallback));
  assert.ok(reconnectMs < 5000, `reconnected after ${reconnectMs} ms`);
  assert.equal(client.fallbackCount, log.filter((e) => e.fallback).length);
  // The fallback routes this failure exactly as the daemon does.
  for (const e of log) {
    assert.equal(e.decision.action, Action.ACTION_RETRY);
    assert.equal(durationToMs(e.decision.delay ?? { seconds: -1, nanos: 0 }), backoffDelayMs(e.attempt));
  }
});
