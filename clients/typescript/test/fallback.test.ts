// The local fallback through the client, and the parts the conformance
// runner's cases do not reach (the environment, the formula's far edges).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { Action, Reason, SquawkClient, SquawkError, SquawkInputError, type FallbackEvent } from "../src/index";
import { backoffDelayMs } from "../src/backoff";
import { fallbackProfileFromEnv } from "../src/env";
import { fallbackDecide } from "../src/fallback";
import { waitHint } from "../src/headers";
import { freePort } from "./support/daemon";
import { decideRequest } from "./support/vectors";

// The clock of the pure tests.
const NOW = Date.UTC(2026, 0, 1);

describe("fallback through the client (daemon unreachable)", () => {
  let client: SquawkClient;
  const events: FallbackEvent[] = [];

  before(async () => {
    // Nothing listens on this port: every call fails UNAVAILABLE.
    client = new SquawkClient(`127.0.0.1:${await freePort()}`, { onFallback: (e) => events.push(e) });
  });
  after(() => client.close());

  // What the fallback decides is checked case by case by the conformance
  // runner (clients/fallback/cases.json); here, that the client asks it.
  test("a decision the daemon cannot give comes from the fallback, counted and reported", async () => {
    const answer = await client.decideRetry({ attempt: 1, httpStatus: 503 });
    assert.equal(answer.fallback, true);
    assert.equal(answer.action, Action.ACTION_RETRY);
    assert.deepEqual(answer.delay, { seconds: 0, nanos: 542_000_000 });
    assert.equal(client.fallbackCount, 1);
    assert.equal(events.length, 1);
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

  test("Retry-After as an IMF-fixdate in the future", () => {
    const now = Date.UTC(2015, 9, 21, 7, 27, 50);
    const d = fallbackDecide(decideRequest({ attempt: 1, httpStatus: 503, headers: { "retry-after": "Wed, 21 Oct 2015 07:28:00 GMT" } }), now);
    assert.equal(d.action, Action.ACTION_RETRY);
    assert.deepEqual(d.delay, { seconds: 10, nanos: 0 });
  });

  test("only an IMF-fixdate is a date, as the Go client reads it", () => {
    const now = Date.UTC(2015, 9, 21, 7, 27, 50);
    assert.equal(waitHint({ "Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT" }, now)?.ms, 10_000);
    for (const value of [
      "wed, 21 oct 2015 07:28:00 GMT",
      "Wed,  21 Oct 2015 07:28:00 GMT",
      "Wed, 21 Oct 2015 7:28:00 GMT",
      "Wed, 21 Oct 2015 07:28:00 gmt",
      "Wed, 31 Feb 2015 07:28:00 GMT",
      "Wed, 21 Oct 2015 24:00:00 GMT",
      "Wednesday, 21-Oct-15 07:28:00 GMT",
    ]) {
      assert.equal(waitHint({ "Retry-After": value }, now), undefined, value);
    }
  });

  test("grpc-retry-pushback-ms is case-insensitive and Retry-After wins", () => {
    assert.equal(waitHint({ "Grpc-Retry-Pushback-Ms": "40" }, NOW)?.ms, 40);
    assert.equal(waitHint({ "grpc-retry-pushback-ms": "40", "Retry-After": "1" }, NOW)?.ms, 1000);
    assert.equal(waitHint({ "Retry-After": "x", "grpc-retry-pushback-ms": "40" }, NOW)?.ms, 40);
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
      (w: string) => warnings.push(w),
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
