// Every case of tests/vectors/throttle.json (client-side throttling, which
// the Python and Go clients run too) against the client's state machine on
// a fake clock with the case's random draws: which calls are sent, and how
// the sent ones end (at once, or later, from in flight).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { Throttle, type RpcMethod } from "../src/throttle";
import { repoRoot } from "./support/daemon";

/** A call (draw, sent, maybe end, maybe repeat), or the end of calls in flight (ended, end). */
interface ThrottleEvent {
  readonly at: number;
  readonly method: string;
  readonly draw?: number;
  readonly sent?: boolean;
  /** A gRPC status name: how a sent call ends at the same `at` (absent: it stays in flight), or how `ended` calls end. */
  readonly end?: string;
  readonly repeat?: number;
  /** How many of the method's calls in flight end now, each with `end`. */
  readonly ended?: number;
}

interface ThrottleCase {
  readonly name: string;
  readonly events: readonly ThrottleEvent[];
}

const vectors = JSON.parse(readFileSync(join(repoRoot(), "tests", "vectors", "throttle.json"), "utf8")) as {
  about: string;
  cases: ThrottleCase[];
};

const METHODS: ReadonlySet<string> = new Set<RpcMethod>([
  "Classify",
  "DecideRetry",
  "DecideRetryBatch",
  "AnalyzeError",
  "CheckDispatch",
  "Admit",
  "ReportOutcome",
  "GetUpstreams",
  "GetEvents",
  "ExplainDecision",
]);

/**
 * The clocks each case runs on: the vectors' own, and the wall clock's
 * scale (a whole second, so that the seconds' boundaries stay where they are).
 */
const EPOCHS = [0, Date.UTC(2026, 0, 1)];

/** The status named `name`, which the event must give. */
function statusNamed(name: string | undefined, where: string): status {
  const code = status[name as keyof typeof status];
  assert.equal(typeof code, "number", `${where}: ${String(name)} is no gRPC status name`);
  return code;
}

function run(c: ThrottleCase, epoch: number): void {
  const throttle = new Throttle();
  const inFlight = new Map<RpcMethod, number>();
  c.events.forEach((event, i) => {
    const where = `events[${i}] at ${event.at} ms`;
    assert.ok(METHODS.has(event.method), `${where}: unknown method ${event.method}`);
    const method = event.method as RpcMethod;
    const now = epoch + event.at;
    if (event.ended !== undefined) {
      assert.equal(event.draw, undefined, `${where}: an end of calls in flight is no call`);
      const code = statusNamed(event.end, where);
      const flying = inFlight.get(method) ?? 0;
      assert.ok(Number.isInteger(event.ended) && event.ended >= 1 && event.ended <= flying, `${where}: ends ${event.ended} of ${flying} calls in flight`);
      for (let n = 0; n < event.ended; n += 1) throttle.ended(method, now, code);
      inFlight.set(method, flying - event.ended);
      return;
    }
    const repeat = event.repeat ?? 1;
    assert.ok(Number.isInteger(repeat) && repeat >= 1, `${where}: repeat ${repeat}`);
    assert.ok(event.draw !== undefined && event.draw >= 0 && event.draw < 1, `${where}: draw ${event.draw} is not in [0, 1)`);
    assert.equal(typeof event.sent, "boolean", `${where}: a call says whether it is sent`);
    const code = event.end === undefined ? undefined : statusNamed(event.end, where);
    if (!event.sent) assert.equal(code, undefined, `${where}: a call not sent has no end`);
    for (let n = 0; n < repeat; n += 1) {
      const verdict = throttle.allow(method, now, event.draw);
      assert.equal(
        verdict.send,
        event.sent,
        `${where} (call ${n + 1} of ${repeat}): sent, with ${verdict.requests} requests and ${verdict.accepts} accepts before it`,
      );
      if (!event.sent) continue;
      if (code === undefined) inFlight.set(method, (inFlight.get(method) ?? 0) + 1);
      else throttle.ended(method, now, code);
    }
  });
}

describe("throttle vectors (tests/vectors/throttle.json)", () => {
  test("the file has cases", () => {
    assert.ok(vectors.cases.length > 0);
  });

  for (const c of vectors.cases) {
    for (const epoch of EPOCHS) {
      test(`${c.name} (clock from ${epoch} ms)`, () => run(c, epoch));
    }
  }
});
