// Client-side throttling over the wire (the rules themselves are the
// vectors', test/throttle-vectors.test.ts): against a loopback server
// refusing every call RESOURCE_EXHAUSTED, the client stops sending most of
// them and answers as the daemon's refusal would have (the fallback's
// decision, a fail-open admission, a SquawkError for the others), yet
// sends a burst asked before any answer whole, and does not count a call its
// caller aborts; against one answering every call, it sends them all.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Metadata, status, type ClientUnaryCall, type ServiceError } from "@grpc/grpc-js";
import { SquawkClient, SquawkError, type Decision, type FallbackEvent } from "../src/index";
import { fallbackDecide } from "../src/fallback";
import { decideRequest } from "../src/requests";
import { unary, type Start } from "../src/unary";
import { answering, type Answering } from "./support/answering";

const CALLS = 200;
const INPUT = { attempt: 1, httpStatus: 503 } as const;
/** What the daemon's refusal leaves each throttled call with: its text, after the method's name. */
const NOT_SENT = /^squawk: not sent: the daemon answered 0 of the last (\d+) (\w+) calls in time \(10 s; client-side throttling\)$/;

/** The fallback's decision of INPUT, as the client gives it. */
function fallbackDecision(): Decision {
  return { ...fallbackDecide(decideRequest(INPUT), Date.now()), decisionId: "", fallback: true };
}

describe("against a daemon refusing every call for load", () => {
  let server: Answering;
  let client: SquawkClient;
  const events: FallbackEvent[] = [];

  before(async () => {
    server = await answering(status.RESOURCE_EXHAUSTED);
    client = new SquawkClient(server.target, { callTimeoutMs: 5000, onFallback: (e) => events.push(e) });
  });
  after(() => {
    client?.close();
    server?.server.forceShutdown();
  });

  test(`${CALLS} decisions in a row all come from the fallback, and most are never sent`, async () => {
    const expected = fallbackDecision();
    for (let i = 0; i < CALLS; i += 1) {
      assert.deepEqual(await client.decideRetry(INPUT), expected, `decision ${i}`);
    }
    const sent = server.received.get("decideRetry") ?? 0;
    // The first 20 always go; past them call i goes with probability
    // 1 / (i + 1): about 22 in all, 40 almost never (while the 200 take
    // under ten seconds, the window's length).
    assert.ok(sent >= 20 && sent <= 40, `the daemon received ${sent} of ${CALLS} calls, expected 20 to 40`);
    // Each is counted as a fallback, sent or refused locally, and says why.
    assert.equal(client.fallbackCount, CALLS);
    assert.equal(events.length, CALLS);
    const local = events.filter((e) => NOT_SENT.test(e.cause.details));
    assert.equal(local.length, CALLS - sent, "a call not sent says why");
    for (const e of local) {
      assert.equal(e.method, "decideRetry");
      assert.equal(e.cause.code, status.RESOURCE_EXHAUSTED);
      const [, requests, method] = NOT_SENT.exec(e.cause.details) ?? [];
      assert.equal(method, "DecideRetry");
      assert.ok(Number(requests) >= 20, `refused with ${requests} requests in the window`);
    }
  });

  test("each method has its own window: admit fails open, sent or not", async () => {
    for (let i = 0; i < 60; i += 1) {
      const admission = await client.admit({ profile: "default", upstream: "api.example" });
      assert.equal(admission.allowed, true);
      assert.equal(admission.fallback, true);
    }
    const sent = server.received.get("admit") ?? 0;
    assert.ok(sent >= 20 && sent < 60, `the daemon received ${sent} of 60 admits`);
  });

  test("a call without a fallback rejects as the daemon's refusal would, with why it was not sent", async () => {
    const errors: SquawkError[] = [];
    for (let i = 0; i < 60; i += 1) {
      await assert.rejects(client.classify({ errorMessage: "status 429" }), (e: unknown) => {
        assert.ok(e instanceof SquawkError, String(e));
        assert.equal(e.code, status.RESOURCE_EXHAUSTED);
        errors.push(e);
        return true;
      });
    }
    const sent = server.received.get("classify") ?? 0;
    assert.ok(sent >= 20 && sent < 60, `the daemon received ${sent} of 60 classify calls`);
    const local = errors.filter((e) => e.message.includes("not sent"));
    assert.equal(local.length, 60 - sent);
    for (const e of local) assert.match(e.message.replace(/^classify: /, ""), NOT_SENT);
  });

  test("while calls are refused, an aborted signal still rejects with its own reason", async () => {
    // The window of decideRetry is full of refusals (the first test's).
    const reason = new Error("caller gave up");
    for (let i = 0; i < 20; i += 1) {
      await assert.rejects(client.decideRetry(INPUT, { signal: AbortSignal.abort(reason) }), (e: unknown) => e === reason);
    }
  });

  test("calls in flight are no evidence: a burst asked at once is sent whole", async () => {
    const fresh = new SquawkClient(server.target, { callTimeoutMs: 5000 });
    try {
      const before = server.received.get("checkDispatch") ?? 0;
      const burst = Array.from({ length: 60 }, () => fresh.checkDispatch({ parameters: { q: 1 } }));
      const ends = await Promise.allSettled(burst);
      assert.ok(ends.every((e) => e.status === "rejected" && !String(e.reason).includes("not sent")));
      assert.equal((server.received.get("checkDispatch") ?? 0) - before, 60);
    } finally {
      fresh.close();
    }
  });

  test("a call its caller aborts in flight is not counted", async () => {
    const events: FallbackEvent[] = [];
    const fresh = new SquawkClient(server.target, { callTimeoutMs: 5000, onFallback: (e) => events.push(e) });
    try {
      const reason = new Error("caller gave up");
      for (let i = 0; i < 30; i += 1) {
        const controller = new AbortController();
        const pending = fresh.decideRetry(INPUT, { signal: controller.signal });
        controller.abort(reason);
        await assert.rejects(pending, (e: unknown) => e === reason);
      }
      // Had the 30 counted as requests (none answered), these would be refused nearly all.
      for (let i = 0; i < 20; i += 1) await fresh.decideRetry(INPUT);
      assert.equal(events.length, 20);
      assert.deepEqual(
        events.filter((e) => NOT_SENT.test(e.cause.details)).map((e) => e.cause.details),
        [],
        "no call was refused locally",
      );
    } finally {
      fresh.close();
    }
  });
});

describe("against a daemon answering every call", () => {
  let server: Answering;
  let client: SquawkClient;

  before(async () => {
    server = await answering(status.OK);
    client = new SquawkClient(server.target, { callTimeoutMs: 5000 });
  });
  after(() => {
    client?.close();
    server?.server.forceShutdown();
  });

  test(`${CALLS} decisions in a row are all sent, and all the daemon's`, async () => {
    for (let i = 0; i < CALLS; i += 1) {
      const decision = await client.decideRetry(INPUT);
      assert.equal(decision.fallback, false, `decision ${i}`);
    }
    assert.equal(server.received.get("decideRetry"), CALLS);
    assert.equal(client.fallbackCount, 0);
  });
});

describe("how a call's end reaches the throttle", () => {
  /** A call whose answer the test gives: `end` ends it as the server would. */
  function scripted(): { start: Start<object>; end: (error: ServiceError | null) => void } {
    let callback: ((error: ServiceError | null, response: object) => void) | undefined;
    return {
      start: (_md, _co, cb) => {
        callback = cb;
        return { cancel: () => undefined } as unknown as ClientUnaryCall;
      },
      end: (error) => callback?.(error, {}),
    };
  }

  const exhausted = (): ServiceError =>
    Object.assign(new Error("8 RESOURCE_EXHAUSTED: busy"), { code: status.RESOURCE_EXHAUSTED, details: "busy", metadata: new Metadata() });

  test("an answer or a status ends the call with its code", async () => {
    const codes: status[] = [];
    const ok = scripted();
    const answered = unary(ok.start, new Metadata(), 1000, undefined, (code) => codes.push(code));
    ok.end(null);
    await answered;
    const busy = scripted();
    const refused = unary(busy.start, new Metadata(), 1000, undefined, (code) => codes.push(code));
    busy.end(exhausted());
    await assert.rejects(refused);
    assert.deepEqual(codes, [status.OK, status.RESOURCE_EXHAUSTED]);
  });

  test("the caller's cancellation is no end the throttle hears of", async () => {
    const codes: status[] = [];
    const call = scripted();
    const controller = new AbortController();
    const pending = unary(call.start, new Metadata(), 1000, controller.signal, (code) => codes.push(code));
    controller.abort(new Error("caller gave up"));
    // grpc-js then ends the cancelled call CANCELLED, which would count as answered.
    call.end(Object.assign(new Error("1 CANCELLED"), { code: status.CANCELLED, details: "", metadata: new Metadata() }));
    await assert.rejects(pending, /caller gave up/);
    assert.deepEqual(codes, []);
  });
});
