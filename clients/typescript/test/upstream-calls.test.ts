// admit, reportOutcome and getUpstreams against the real daemon (built-in
// policy), and how they fail open when the daemon is unreachable.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { status } from "@grpc/grpc-js";
import {
  BreakerState,
  durationToMs,
  Reason,
  SquawkClient,
  SquawkError,
  SquawkInputError,
  type FallbackEvent,
  type UpstreamState,
} from "../src/index";
import { Daemon, freePort } from "./support/daemon";
import { uniqueUpstream } from "./support/upstreams";

const isInputError = (field: string) => (e: unknown) => e instanceof SquawkInputError && e.field === field;

/** Inputs refused before any call, naming the field, with the daemon or without it. */
const UNENCODABLE: Array<[string, (client: SquawkClient) => Promise<unknown>, string]> = [
  ["a report without a list", (c) => c.reportOutcome({} as never), "outcomes"],
  ["an outcome that is not an object", (c) => c.reportOutcome({ outcomes: [{ upstream: "u" }, 7 as never] }), "outcomes[1]"],
  ["a fractional outcome status", (c) => c.reportOutcome({ outcomes: [{ upstream: "u", httpStatus: 503.5 }] }), "outcomes[0].http_status"],
  [
    "fractional latency seconds",
    (c) => c.reportOutcome({ outcomes: [{ upstream: "u", success: true, latency: { seconds: 1.5 } }] }),
    "outcomes[0].latency.seconds",
  ],
  ["a null admit request", (c) => c.admit(null as never), "request"],
];

describe("the upstream calls against the daemon", () => {
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

  const find = async (upstream: string): Promise<UpstreamState | undefined> =>
    (await client.getUpstreams()).find((u) => u.upstream === upstream);

  test("a new upstream is admitted with its breaker closed, and tracked from then on", async () => {
    const upstream = uniqueUpstream("admit");
    const admission = await client.admit({ upstream, capability: "search_hotels" });
    assert.equal(admission.allowed, true);
    assert.equal(admission.reason, Reason.REASON_ADMITTED);
    assert.equal(admission.breakerState, BreakerState.BREAKER_STATE_CLOSED);
    assert.equal(admission.probe, false);
    assert.equal(admission.fallback, false);
    assert.equal(admission.retryAfter === undefined ? 0 : durationToMs(admission.retryAfter), 0);
    const state = await find(upstream);
    assert.equal(state?.profile, "default");
    assert.equal(state?.breakerState, BreakerState.BREAKER_STATE_CLOSED);
    assert.equal(client.fallbackCount, 0);
  });

  test("an empty upstream is admitted and never tracked", async () => {
    const admission = await client.admit({});
    assert.equal(admission.allowed, true);
    assert.equal(admission.reason, Reason.REASON_ADMITTED);
    assert.equal(await find(""), undefined);
  });

  test("reported outcomes count in the window; one without an upstream is not recorded", async () => {
    const upstream = uniqueUpstream("report");
    const recorded = await client.reportOutcome({
      outcomes: [
        { upstream, success: true, latency: { seconds: 0, nanos: 12_000_000 } },
        { upstream, success: false, httpStatus: 503 },
        { upstream: "", success: true },
      ],
    });
    assert.equal(recorded, 2);
    const state = await find(upstream);
    assert.equal(state?.windowCalls, 2);
    assert.equal(state?.windowFailures, 1);
  });

  test("getUpstreams lists one profile's upstreams when asked", async () => {
    const upstream = uniqueUpstream("llm-only");
    await client.admit({ upstream, profile: "llm" });
    const llm = await client.getUpstreams({ profile: "llm" });
    assert.ok(llm.some((u) => u.upstream === upstream));
    assert.ok(llm.every((u) => u.profile === "llm"));
    assert.ok(!(await client.getUpstreams({ profile: "default" })).some((u) => u.upstream === upstream));
  });

  test("ten failures open the breaker: admit refuses with CIRCUIT_OPEN until it half-opens", async () => {
    const upstream = uniqueUpstream("breaker");
    const failures = Array.from({ length: 10 }, () => ({ upstream, success: false, httpStatus: 503 }));
    assert.equal(await client.reportOutcome({ outcomes: failures }), 10);
    const admission = await client.admit({ upstream });
    assert.equal(admission.allowed, false);
    assert.equal(admission.reason, Reason.REASON_CIRCUIT_OPEN);
    assert.equal(admission.breakerState, BreakerState.BREAKER_STATE_OPEN);
    assert.equal(admission.fallback, false);
    // The built-in breaker stays open 30 s; the daemon jitters the wait by 5 s at most.
    const waitMs = durationToMs(admission.retryAfter ?? { seconds: 0, nanos: 0 });
    assert.ok(waitMs > 25_000 && waitMs <= 35_000, `retry_after ${waitMs} ms`);
    assert.equal((await find(upstream))?.breakerState, BreakerState.BREAKER_STATE_OPEN);
  });

  const refusedByDaemon: Array<[string, () => Promise<unknown>, string]> = [
    ["admit with an unknown profile", () => client.admit({ upstream: "u", profile: "no-such-profile" }), "profile"],
    ["an empty report", () => client.reportOutcome({ outcomes: [] }), "outcomes"],
    ["an outcome with an unknown profile", () => client.reportOutcome({ outcomes: [{ upstream: "u", profile: "nope" }] }), "outcomes[0].profile"],
    ["getUpstreams with an unknown profile", () => client.getUpstreams({ profile: "nope" }), "profile"],
  ];
  for (const [name, call, field] of refusedByDaemon) {
    test(`${name} is a SquawkInputError naming ${field}`, async () => {
      await assert.rejects(call(), isInputError(field));
      assert.equal(client.fallbackCount, 0);
    });
  }

  for (const [name, call, field] of UNENCODABLE) {
    test(`${name} is refused naming ${field}`, async () => {
      await assert.rejects(call(client), isInputError(field));
    });
  }
});

describe("the upstream calls without the daemon", () => {
  let client: SquawkClient;
  const events: FallbackEvent[] = [];

  before(async () => {
    client = new SquawkClient(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 500, onFallback: (e) => events.push(e) });
  });
  after(() => client.close());

  test("admit fails open: allowed, breaker closed, marked and counted as a fallback", async () => {
    const before = client.fallbackCount;
    const admission = await client.admit({ upstream: "amadeus", capability: "search_hotels" });
    assert.equal(admission.allowed, true);
    assert.equal(admission.reason, Reason.REASON_ADMITTED);
    assert.equal(admission.breakerState, BreakerState.BREAKER_STATE_CLOSED);
    assert.equal(admission.probe, false);
    assert.equal(admission.fallback, true);
    assert.equal(client.fallbackCount, before + 1);
    assert.equal(events.at(-1)?.method, "admit");
    assert.equal(events.at(-1)?.cause.code, status.UNAVAILABLE);
  });

  test("reportOutcome fails open: nothing recorded, counted as a fallback", async () => {
    const before = client.fallbackCount;
    assert.equal(await client.reportOutcome({ outcomes: [{ upstream: "amadeus", success: true }] }), 0);
    assert.equal(client.fallbackCount, before + 1);
    assert.equal(events.at(-1)?.method, "reportOutcome");
  });

  test("getUpstreams has no fallback", async () => {
    const before = client.fallbackCount;
    await assert.rejects(client.getUpstreams(), (e: unknown) => e instanceof SquawkError && e.code === status.UNAVAILABLE);
    assert.equal(client.fallbackCount, before);
  });

  test("with the fallback off, admit and reportOutcome surface the daemon's error", async () => {
    const strict = new SquawkClient(client.target, { callTimeoutMs: 500, fallback: false });
    try {
      const unavailable = (e: unknown): boolean => e instanceof SquawkError && e.code === status.UNAVAILABLE;
      await assert.rejects(strict.admit({ upstream: "amadeus" }), unavailable);
      await assert.rejects(strict.reportOutcome({ outcomes: [{ upstream: "amadeus", success: true }] }), unavailable);
      assert.equal(strict.fallbackCount, 0);
    } finally {
      strict.close();
    }
  });

  for (const [name, call, field] of UNENCODABLE) {
    test(`${name} is refused naming ${field}, not failed open`, async () => {
      const before = client.fallbackCount;
      await assert.rejects(call(client), isInputError(field));
      assert.equal(client.fallbackCount, before);
    });
  }
});
