// The local fallback against every vector that applies to it.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { status } from "@grpc/grpc-js";
import {
  Action,
  backoffDelayMs,
  fallbackClassify,
  fallbackDecide,
  fallbackProfileFromEnv,
  parseHttpDate,
  Reason,
  retryAfterMs,
  SquawkClient,
  SquawkError,
  SquawkInputError,
  type FallbackEvent,
} from "../src/index";
import { freePort } from "./support/daemon";
import {
  assertMatches,
  caseNowMs,
  classifyRequest,
  decideRequest,
  fallbackExpectation,
  liveExpectation,
  loadVectors,
} from "./support/vectors";

const vectors = loadVectors();
const decideCases = vectors.decide.flatMap((c) => {
  const expect = fallbackExpectation(c);
  return expect === undefined ? [] : [{ ...c, expect }];
});
const classifyCases = vectors.classify.flatMap((c) => {
  const expect = fallbackExpectation(c);
  return expect === undefined ? [] : [{ ...c, expect }];
});
// The clock of the pure tests, for cases that fix none.
const NOW = Date.UTC(2026, 0, 1);

describe("fallback vectors (pure)", () => {
  test("most decide cases apply to the fallback", () => {
    assert.ok(decideCases.length >= vectors.decide.length / 2, `${decideCases.length} of ${vectors.decide.length}`);
  });
  for (const c of decideCases) {
    test(`decide: ${c.name}`, () => {
      assertMatches(fallbackDecide(decideRequest(c.request), caseNowMs(c, NOW)), c.expect, c.name);
    });
  }
  for (const c of classifyCases) {
    test(`classify: ${c.name}`, () => {
      assertMatches(fallbackClassify(classifyRequest(c.request), caseNowMs(c, NOW)), c.expect, c.name);
    });
  }
  for (const c of vectors.redaction) {
    test(`redaction: ${c.name}`, () => {
      const answer = fallbackClassify(classifyRequest({ errorMessage: c.input }), NOW);
      assert.equal(answer.redactedMessage, c.redacted);
      for (const secret of c.secrets) assert.ok(!answer.redactedMessage.includes(secret), answer.redactedMessage);
    });
  }
  for (const c of vectors.invalid.filter((v) => v.rpc === "DecideRetry" && v.field !== "profile")) {
    test(`invalid input throws in the fallback too: ${c.name}`, () => {
      assert.throws(
        () => fallbackDecide(decideRequest(c.request), NOW),
        (error: unknown) => error instanceof SquawkInputError && error.field === c.field,
      );
    });
  }
});

describe("fallback through the client (daemon unreachable)", () => {
  let client: SquawkClient;
  const events: FallbackEvent[] = [];

  before(async () => {
    // Nothing listens on this port: every call fails UNAVAILABLE.
    client = new SquawkClient(`127.0.0.1:${await freePort()}`, { onFallback: (e) => events.push(e) });
  });
  after(() => client.close());

  for (const c of decideCases) {
    test(`decide: ${c.name}`, async () => {
      const answer = await client.decideRetry(decideRequest(c.request));
      assert.equal(answer.fallback, true);
      // The client reads the real clock.
      assertMatches(answer, liveExpectation(c, c.expect), c.name);
    });
  }

  test("every fallback answer is counted and reported", () => {
    assert.equal(client.fallbackCount, decideCases.length);
    assert.equal(events.length, decideCases.length);
    assert.ok(events.every((e) => e.method === "decideRetry"));
  });

  test("invalid input still throws", async () => {
    await assert.rejects(client.decideRetry({ attempt: 0 }), (e: unknown) => e instanceof SquawkInputError && e.field === "attempt");
  });

  test("classify does not fall back: only decisions do", async () => {
    const before = client.fallbackCount;
    await assert.rejects(client.classify({ errorMessage: "status 429" }), (e: unknown) => {
      return e instanceof SquawkError && e.code === status.UNAVAILABLE;
    });
    assert.equal(client.fallbackCount, before);
  });

  test("a string body is read as the envelope", async () => {
    const answer = await client.decideRetry({
      attempt: 1,
      httpStatus: 503,
      responseBody: JSON.stringify({ success: false, error: { retryable: false, message: "no" } }),
    });
    assert.equal(answer.reason, Reason.REASON_EXPLICIT_NOT_RETRYABLE);
  });
});

describe("fallback details", () => {
  test("backoff matches the Python core's sine jitter", () => {
    assert.deepEqual([1, 2, 3, 4, 5, 6, 7, 10].map((a) => backoffDelayMs(a)), [542, 1091, 2028, 3697, 7233, 9721, 10000, 9456]);
    assert.equal(backoffDelayMs(5000), 9012, "sin(5000) < 0: under the cap");
  });

  test("Retry-After as an HTTP-date in the future", () => {
    const now = Date.UTC(2015, 9, 21, 7, 27, 50);
    assert.equal(retryAfterMs({ "Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT" }, now), 10_000);
    const d = fallbackDecide(decideRequest({ attempt: 1, httpStatus: 503, headers: { "retry-after": "Wed, 21 Oct 2015 07:28:00 GMT" } }), now);
    assert.equal(d.action, Action.ACTION_RETRY);
    assert.deepEqual(d.delay, { seconds: 10, nanos: 0 });
  });

  test("HTTP-date forms", () => {
    const want = Date.UTC(1994, 10, 6, 8, 49, 37);
    assert.equal(parseHttpDate("Sun, 06 Nov 1994 08:49:37 GMT"), want);
    assert.equal(parseHttpDate("Sunday, 06-Nov-94 08:49:37 GMT"), want);
    assert.equal(parseHttpDate("06 Nov 1994 09:49:37 +0100"), want);
    // No zone, or "-0000": the daemon ignores it, and so does the fallback.
    assert.equal(parseHttpDate("Sun, 06 Nov 1994 08:49:37"), undefined);
    assert.equal(parseHttpDate("Sun, 06 Nov 1994 08:49:37 -0000"), undefined);
    assert.equal(parseHttpDate("Sun, 31 Feb 1994 08:49:37 GMT"), undefined);
    assert.equal(parseHttpDate("soon"), undefined);
  });

  test("grpc-retry-pushback-ms is case-insensitive and Retry-After wins", () => {
    assert.equal(retryAfterMs({ "Grpc-Retry-Pushback-Ms": "40" }, NOW), 40);
    assert.equal(retryAfterMs({ "grpc-retry-pushback-ms": "40", "Retry-After": "1" }, NOW), 1000);
    assert.equal(retryAfterMs({ "Retry-After": "x", "grpc-retry-pushback-ms": "40" }, NOW), 40);
  });

  test("the fallback routes by the default profile whatever profile is asked for", () => {
    const d = fallbackDecide(decideRequest({ attempt: 1, httpStatus: 501, profile: "llm" }), NOW);
    assert.equal(d.action, Action.ACTION_RETRY);
  });

  test("the pod's SQUAWK_STEP_RETRY_* overrides shape the fallback as they shape the daemon", async () => {
    const warnings: string[] = [];
    const profile = fallbackProfileFromEnv(
      {
        SQUAWK_STEP_RETRY_INITIAL_DELAY: "100ms",
        TRUVAG3_STEP_RETRY_INITIAL_DELAY: "1s",
        TRUVAG3_STEP_RETRY_MAX_DELAY: "1m30s",
        SQUAWK_STEP_RETRY_MAX_ATTEMPTS: "0",
      },
      (w) => warnings.push(w),
    );
    assert.deepEqual(profile.backoff, { initialMs: 100, maxMs: 90_000, factor: 2 });
    assert.equal(profile.maxAttempts, 3, "attempts below 1 are ignored");
    assert.equal(warnings.length, 1);
    assert.match(warnings[0] ?? "", /SQUAWK_STEP_RETRY_MAX_ATTEMPTS/);
    const d = fallbackDecide(decideRequest({ attempt: 1, httpStatus: 503 }), NOW, profile);
    assert.deepEqual(d.delay, { seconds: 0, nanos: 108_000_000 }, "100 ms × (1 + 0.1 sin 1)");
    // A max below the initial delay keeps both defaults.
    const inverted = fallbackProfileFromEnv({ SQUAWK_STEP_RETRY_INITIAL_DELAY: "5s", SQUAWK_STEP_RETRY_MAX_DELAY: "1s" }, () => undefined);
    assert.deepEqual(inverted.backoff, { initialMs: 500, maxMs: 10_000, factor: 2 });
    assert.equal(fallbackProfileFromEnv({ SQUAWK_STEP_RETRY_MAX_ATTEMPTS: "7" }).maxAttempts, 7);
  });
});
