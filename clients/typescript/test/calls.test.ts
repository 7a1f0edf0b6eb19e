// decideRetryBatch, analyzeError and checkDispatch against the real daemon,
// and what each does when the daemon is unreachable.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { status } from "@grpc/grpc-js";
import {
  Action,
  AnalysisSource,
  MAX_BATCH,
  Reason,
  SquawkClient,
  SquawkError,
  SquawkInputError,
  type BatchResult,
  type DecideRetryInput,
} from "../src/index";
import { Daemon, freePort } from "./support/daemon";

const BATCH: DecideRetryInput[] = [
  { attempt: 1, httpStatus: 503 },
  { attempt: 0, httpStatus: 503 },
  { attempt: 3, httpStatus: 503 },
];

/** The README's rules for BATCH: a resend after the default backoff, a refusal naming the item's field, attempts spent. */
function assertBatch(results: BatchResult[], fallback: boolean): void {
  assert.equal(results.length, 3);
  const [first, second, third] = results;
  assert.equal(first?.decision?.action, Action.ACTION_RETRY);
  assert.equal(first?.decision?.reason, Reason.REASON_TRANSIENT_STATUS);
  assert.deepEqual(first?.decision?.delay, { seconds: 0, nanos: 542_000_000 });
  assert.equal(first?.decision?.fallback, fallback);
  assert.equal(second?.decision, undefined);
  assert.ok(second?.error instanceof SquawkInputError);
  assert.equal(second.error.field, "requests[1].attempt");
  assert.match(second.error.message, /^requests\[1\]\.attempt: /);
  assert.equal(third?.decision?.action, Action.ACTION_FAIL);
  assert.equal(third?.decision?.reason, Reason.REASON_ATTEMPTS_EXHAUSTED);
}

const tooMany = (): DecideRetryInput[] => Array.from({ length: MAX_BATCH + 1 }, () => ({ attempt: 1 }));

/** Inputs the wire cannot carry, refused before any call, naming the field. */
const UNENCODABLE: Array<[string, (client: SquawkClient) => Promise<unknown>, string]> = [
  ["a fractional attempt", (c) => c.decideRetry({ attempt: 1.5 }), "attempt"],
  ["an attempt past int32", (c) => c.decideRetry({ attempt: 2 ** 31 }), "attempt"],
  ["fractional deadline seconds", (c) => c.decideRetry({ attempt: 1, deadline: { seconds: 0.5, nanos: 0 } }), "deadline.seconds"],
  ["a numeric body", (c) => c.decideRetry({ attempt: 1, responseBody: 5 as never }), "response_body"],
  ["a null request", (c) => c.decideRetry(null as never), "request"],
  ["a batch item past int32", (c) => c.decideRetryBatch({ requests: [{ attempt: 1 }, { attempt: 1, maxAttempts: 2 ** 40 }] }), "requests[1].max_attempts"],
  ["a batch without a list", (c) => c.decideRetryBatch({} as never), "requests"],
  ["a fractional classify status", (c) => c.classify({ httpStatus: 400.5 }), "http_status"],
  ["a fractional analysis budget", (c) => c.analyzeError({ httpStatus: 400, maxValidationRetries: 0.5 }), "max_validation_retries"],
];

describe("the other calls against the daemon", () => {
  let daemon: Daemon;
  let client: SquawkClient;

  before(async () => {
    daemon = await Daemon.start();
    client = new SquawkClient(daemon.target, { fallback: false, callTimeoutMs: 5000 });
  });

  after(async () => {
    client?.close();
    await daemon?.stop();
  });

  test("decideRetryBatch answers each item in order, a bad item with its own error", async () => {
    assertBatch(await client.decideRetryBatch({ requests: BATCH }), false);
  });

  test("decideRetryBatch of nothing is nothing", async () => {
    assert.deepEqual(await client.decideRetryBatch({ requests: [] }), []);
  });

  test("the daemon refuses a batch over the limit as a whole", async () => {
    await assert.rejects(
      client.decideRetryBatch({ requests: tooMany() }),
      (e: unknown) => e instanceof SquawkInputError && e.field === "requests",
    );
  });

  test("analyzeError fixes an enum value by unambiguous abbreviation (PARIS -> PAR)", async () => {
    const answer = await client.analyzeError({
      httpStatus: 400,
      errorResponse: "INVALID CITY CODE",
      originalRequest: { city_code: "PARIS" },
      parameterSchema: {
        type: "object",
        properties: { city_code: { type: "string", enum: ["PAR", "LON", "NYC"] } },
      },
    });
    assert.equal(answer.shouldRetry, true);
    assert.equal(answer.isTransientError, false);
    assert.deepEqual(answer.suggestedChanges, { city_code: "PAR" });
    assert.equal(answer.source, AnalysisSource.ANALYSIS_SOURCE_HEURISTIC);
  });

  test("analyzeError skips a 5xx: transient, nothing suggested", async () => {
    const answer = await client.analyzeError({ httpStatus: 503, originalRequest: { q: 1 } });
    assert.equal(answer.shouldRetry, false);
    assert.equal(answer.isTransientError, true);
  });

  test("analyzeError names the path of a bad value", async () => {
    await assert.rejects(
      client.analyzeError({ httpStatus: 400, originalRequest: { rooms: [{ beds: Number.NaN }] } }),
      (e: unknown) => e instanceof SquawkInputError && e.field === "original_request.rooms[0].beds",
    );
    await assert.rejects(
      client.analyzeError({ httpStatus: 700 }),
      (e: unknown) => e instanceof SquawkInputError && e.field === "http_status",
    );
  });

  test("checkDispatch passes parameters that break none of its four rules", async () => {
    const answer = await client.checkDispatch({
      parameters: { city: "PAR", nights: "3" },
      parameterSchema: { type: "object", required: ["city"], properties: { nights: { type: "integer" } } },
    });
    assert.equal(answer.ok, true);
    assert.deepEqual(answer.violations, []);
  });

  test("checkDispatch refuses an unresolved reference and a missing required key", async () => {
    const answer = await client.checkDispatch({
      parameters: { city: "{{step-1.city}}" },
      parameterSchema: { type: "object", required: ["city", "date"] },
    });
    assert.equal(answer.ok, false);
    assert.deepEqual(
      answer.violations.map((v) => [v.parameter, v.rule]).sort(),
      [
        ["city", "unresolved_reference"],
        ["date", "required"],
      ],
    );
  });

  for (const [name, call, field] of UNENCODABLE) {
    test(`${name} is refused naming ${field}`, async () => {
      await assert.rejects(call(client), (e: unknown) => e instanceof SquawkInputError && e.field === field);
    });
  }

  test("no answer came from the fallback", () => {
    assert.equal(client.fallbackCount, 0);
  });
});

describe("the other calls with the daemon unreachable", () => {
  let client: SquawkClient;

  before(async () => {
    client = new SquawkClient(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 2000 });
  });

  after(() => client?.close());

  test("decideRetryBatch falls back item by item", async () => {
    const before = client.fallbackCount;
    assertBatch(await client.decideRetryBatch({ requests: BATCH }), true);
    assert.equal(client.fallbackCount - before, 2, "each decided item counts");
  });

  test("the fallback refuses a batch over the limit as a whole", async () => {
    await assert.rejects(
      client.decideRetryBatch({ requests: tooMany() }),
      (e: unknown) => e instanceof SquawkInputError && e.field === "requests",
    );
  });

  const noFallback: Array<[string, (c: SquawkClient) => Promise<unknown>]> = [
    ["classify", (c) => c.classify({ httpStatus: 503 })],
    ["analyzeError", (c) => c.analyzeError({ httpStatus: 400 })],
    ["checkDispatch", (c) => c.checkDispatch({ parameters: { city: "PAR" } })],
  ];
  for (const [name, call] of noFallback) {
    test(`${name} has no fallback: the daemon's absence is an error`, async () => {
      const before = client.fallbackCount;
      await assert.rejects(call(client), (e: unknown) => e instanceof SquawkError && e.code === status.UNAVAILABLE);
      assert.equal(client.fallbackCount, before);
    });
  }

  for (const [name, call, field] of UNENCODABLE) {
    test(`${name} is refused naming ${field}, without the daemon`, async () => {
      await assert.rejects(call(client), (e: unknown) => e instanceof SquawkInputError && e.field === field);
    });
  }
});
