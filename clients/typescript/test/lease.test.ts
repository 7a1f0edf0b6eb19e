// Spare permits (SquawkClientOptions.leasePermits) against a loopback server
// that scripts each Admit answer and counts the calls: what the daemon
// granted is used, for the same (profile, upstream, capability) only, never
// after the lease, and never from a grant the client should not trust.
import assert from "node:assert/strict";
import { describe, test, type TestContext } from "node:test";
import { Server, ServerCredentials, status, type ServiceError, type UntypedServiceImplementation } from "@grpc/grpc-js";
import {
  AdmitRequest,
  AdmitResponse,
  BreakerState,
  durationFromMs,
  Reason,
  runStep,
  SquawkClient,
  StepError,
  type Admission,
  type OutcomeInput,
} from "../src/index";
import { PolicyServiceService } from "../src/gen/squawk/v1/policy";

type DeepPartialAdmit = Partial<AdmitResponse>;
type Callback<T> = (error: Partial<ServiceError> | null, response?: T) => void;

/**
 * Admits with `grant` (over a closed, allowed answer; read at each call, so
 * a test may change it) and records every Admit request; DecideRetry is
 * UNAVAILABLE.
 */
async function scripted(grant: DeepPartialAdmit): Promise<{ target: string; server: Server; asked: AdmitRequest[] }> {
  const server = new Server();
  const asked: AdmitRequest[] = [];
  const impl: UntypedServiceImplementation = {};
  for (const method of Object.keys(PolicyServiceService)) {
    impl[method] = (_call: unknown, callback: Callback<never>) => callback({ code: status.UNAVAILABLE });
  }
  impl["admit"] = (call: { request: AdmitRequest }, callback: Callback<AdmitResponse>) => {
    asked.push(call.request);
    callback(
      null,
      AdmitResponse.fromPartial({
        allowed: true,
        reason: Reason.REASON_ADMITTED,
        breakerState: BreakerState.BREAKER_STATE_CLOSED,
        permits: 1,
        ...grant,
      }),
    );
  };
  impl["reportOutcome"] = (_call: unknown, callback: Callback<{ recorded: number }>) => callback(null, { recorded: 1 });
  server.addService(PolicyServiceService, impl);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  return { target: `127.0.0.1:${port}`, server, asked };
}

/** A client with leasePermits 4 and a clock the test moves, against a server granting `grant`. */
async function withLeases(
  grant: DeepPartialAdmit,
  body: (client: SquawkClient, asked: AdmitRequest[], clock: { ms: number }) => Promise<void>,
  batchOutcomes = false,
): Promise<void> {
  const { target, server, asked } = await scripted(grant);
  const clock = { ms: 1_000_000 };
  const client = new SquawkClient(target, { callTimeoutMs: 5000, leasePermits: 4, now: () => clock.ms, batchOutcomes });
  try {
    await body(client, asked, clock);
  } finally {
    await client.close();
    server.forceShutdown();
  }
}

const FOUR = { permits: 4, lease: durationFromMs(1000) };
/** A lease of paced starts, as the daemon grants one under a declared rate: 4 permits 50 ms apart, the first after 10 ms. */
const PACED = { permits: 4, lease: durationFromMs(200), wait: durationFromMs(10), spacing: durationFromMs(50) };
const ok = async (): Promise<string> => "ok";
const ms = (d: { seconds: number; nanos: number } | undefined): number | undefined =>
  d === undefined ? undefined : d.seconds * 1000 + d.nanos / 1e6;
const starts = (a: Admission): [number | undefined, number | undefined] => [ms(a.wait), ms(a.spacing)];

describe("spare permits", () => {
  test("every permit of a grant names the grant's admission, which its outcome sends back", async () => {
    await withLeases({ ...FOUR, admissionId: "00000000000000a1" }, async (client) => {
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) ids.push((await client.admit({ upstream: "api" })).admissionId);
      assert.deepEqual(ids, ["00000000000000a1", "00000000000000a1", "00000000000000a1", "00000000000000a1"]);
    });
  });

  test("an admission id not in the daemon's shape is not kept (a report naming it would be refused)", async () => {
    await withLeases({ admissionId: "00000000000000A1" }, async (client) => {
      assert.equal((await client.admit({ upstream: "api" })).admissionId, "");
    });
  });

  test("a grant of 4 admits 4 dispatches with one Admit, and the 5th asks again", async () => {
    await withLeases(FOUR, async (client, asked) => {
      for (let i = 0; i < 4; i++) assert.equal(await runStep(client, i, ok, { upstream: "api" }), "ok");
      assert.equal(asked.length, 1);
      assert.equal(asked[0]?.permits, 4, "the client asks for its leasePermits");
      const fifth = await client.admit({ upstream: "api" });
      assert.deepEqual([fifth.allowed, fifth.permits, fifth.fallback, asked.length], [true, 1, false, 2]);
    });
  });

  test("a spare permit lapses when the lease ends (from when the client asked)", async () => {
    await withLeases(FOUR, async (client, asked, clock) => {
      await client.admit({ upstream: "api" });
      clock.ms += 999;
      await client.admit({ upstream: "api" });
      assert.equal(asked.length, 1, "inside the lease");
      clock.ms += 1;
      await client.admit({ upstream: "api" });
      assert.equal(asked.length, 2, "the lease ended");
    });
  });

  test("spares belong to their (profile, upstream, capability); an empty profile is default's", async () => {
    await withLeases(FOUR, async (client, asked) => {
      await client.admit({ upstream: "api", capability: "search" });
      await client.admit({ upstream: "api", capability: "book" });
      await client.admit({ upstream: "other", capability: "search" });
      await client.admit({ upstream: "api", capability: "search", profile: "llm" });
      assert.equal(asked.length, 4);
      await client.admit({ upstream: "api", capability: "search", profile: "default" });
      assert.equal(asked.length, 4, "default's spare, granted to an empty profile");
    });
  });

  test("a failure of the upstream sent to decideRetry drops its spares, every capability's", async () => {
    await withLeases(FOUR, async (client, asked) => {
      await client.admit({ upstream: "api", capability: "search" });
      await client.admit({ upstream: "api", capability: "book" });
      await client.admit({ upstream: "other" });
      await assert.rejects(
        runStep(client, 0, () => Promise.reject(new StepError("busy", { httpStatus: 503 })), {
          upstream: "api",
          capability: "search",
          maxAttempts: 1,
        }),
      );
      // The step's own Admit used a spare; the failure dropped the rest of api's.
      assert.equal(asked.length, 3);
      await client.admit({ upstream: "api", capability: "book" });
      await client.admit({ upstream: "api", capability: "search" });
      assert.equal(asked.length, 5);
      await client.admit({ upstream: "other" });
      assert.equal(asked.length, 5, "another upstream keeps its spares");
    });
  });

  const untrusted: Array<[string, DeepPartialAdmit, number]> = [
    ["more permits than asked: only the 4 asked for", { permits: 1000, lease: durationFromMs(1000) }, 4],
    ["a probe", { ...FOUR, probe: true, breakerState: BreakerState.BREAKER_STATE_HALF_OPEN }, 1],
    ["no lease", { permits: 4 }, 1],
    ["a negative lease", { permits: 4, lease: { seconds: -1, nanos: 0 } }, 1],
  ];
  for (const [name, grant, dispatches] of untrusted) {
    test(`${name}: one Admit covers ${dispatches} dispatch(es)`, async () => {
      await withLeases(grant, async (client, asked) => {
        for (let i = 0; i < 6; i++) await client.admit({ upstream: "api" });
        assert.equal(asked.length, Math.ceil(6 / dispatches));
      });
    });
  }

  // The daemon grants leases under a declared or announced rate too: such a
  // grant's spare permits are kept, each waiting for its own start.
  test("a paced grant keeps its spare permits: one Admit covers 4 dispatches, each after its start", async () => {
    await withLeases({ ...FOUR, wait: durationFromMs(20) }, async (client, asked) => {
      const admissions: Admission[] = [];
      for (let i = 0; i < 6; i++) admissions.push(await client.admit({ upstream: "api" }));
      assert.equal(asked.length, 2);
      // No spacing: every spare permit starts after the grant's wait.
      assert.deepEqual(admissions.slice(0, 4).map((a) => ms(a.wait)), [20, 20, 20, 20]);
    });
  });

  test("a lease of paced starts: each spare permit's admission carries the wait for its own start", async () => {
    await withLeases({ ...PACED, admissionId: "00000000000000c1" }, async (client, asked, clock) => {
      const first = await client.admit({ upstream: "api" });
      assert.deepEqual(
        [first.permits, first.lease, first.admissionId, ...starts(first)],
        [1, undefined, "00000000000000c1", 10, 50],
        "the asking dispatch: the grant's wait, and its spacing",
      );
      assert.deepEqual(starts(await client.admit({ upstream: "api" })), [60, 50]);
      clock.ms += 100;
      assert.deepEqual(starts(await client.admit({ upstream: "api" })), [10, 50], "the next start, 100 ms later");
      clock.ms += 70;
      // A start passed: the permit may start late, at once.
      const late = await client.admit({ upstream: "api" });
      assert.deepEqual([late.admissionId, ...starts(late)], ["00000000000000c1", undefined, 50]);
      assert.equal(asked.length, 1);
    });
  });

  test("a spare permit starting no sooner than the admit's deadline is left for the next admit", async () => {
    const grant: DeepPartialAdmit = { permits: 3, lease: durationFromMs(200), spacing: durationFromMs(100) };
    await withLeases(grant, async (client, asked) => {
      await client.admit({ upstream: "api" });
      // The pace cannot start this one in time either: a refusal leaves the spares.
      Object.assign(grant, { allowed: false, reason: Reason.REASON_UPSTREAM_SATURATED, permits: 0 });
      const shed = await client.admit({ upstream: "api", deadline: durationFromMs(100) });
      assert.deepEqual([shed.allowed, asked.length], [false, 2], "a start at 100 ms is not before a deadline of 100 ms");
      const later = await client.admit({ upstream: "api", deadline: durationFromMs(101) });
      assert.deepEqual([later.allowed, later.fallback, ms(later.wait), asked.length], [true, false, 100, 2]);
      assert.deepEqual(starts(await client.admit({ upstream: "api" })), [200, 100]);
      assert.equal(asked.length, 2);
    });
  });

  test("a later grant replaces the spare permits and their starts; a single one drops them", async () => {
    const grant: DeepPartialAdmit = { permits: 3, lease: durationFromMs(200), spacing: durationFromMs(100) };
    await withLeases(grant, async (client, asked) => {
      await client.admit({ upstream: "api" });
      Object.assign(grant, { permits: 2, wait: durationFromMs(20), spacing: durationFromMs(30) });
      // A step whose deadline the spare permit's start misses asks, and the answer replaces the lease.
      await client.admit({ upstream: "api", deadline: durationFromMs(50) });
      assert.deepEqual(starts(await client.admit({ upstream: "api" })), [50, 30]);
      assert.equal(asked.length, 2);
      await client.admit({ upstream: "api" });
      assert.equal(asked.length, 3, "the replacing lease had one spare permit");
      // That answer leased one more; a single grant drops it.
      Object.assign(grant, { permits: 1 });
      await client.admit({ upstream: "api", deadline: durationFromMs(10) });
      assert.equal(asked.length, 4);
      await client.admit({ upstream: "api" });
      assert.equal(asked.length, 5, "a grant of one left no spare permit");
    });
  });

  test("an answer's spacing is read within [0, 1 s], and only with more than one permit", async () => {
    for (const [grant, want] of [
      [{ ...FOUR, spacing: durationFromMs(5000) }, 1000],
      [{ ...FOUR, spacing: { seconds: -1, nanos: 0 } }, undefined],
      [{ permits: 1, spacing: durationFromMs(50) }, undefined],
    ] as const) {
      await withLeases(grant, async (client) => {
        assert.equal(ms((await client.admit({ upstream: "api" })).spacing), want);
        // The caller's own permits: the answer as the daemon sent it, the spacing clamped the same way.
        assert.equal(ms((await client.admit({ upstream: "api", permits: 4 })).spacing), want);
      });
    }
  });

  test("the runner sleeps a leased permit's wait for its start before dispatching", async () => {
    await withLeases(PACED, async (client, asked) => {
      const log: string[] = [];
      const sleep = async (waitMs: number): Promise<void> => {
        log.push(`sleep ${waitMs}`);
      };
      const step = async (i: number): Promise<number> => {
        log.push(`dispatch ${i}`);
        return i;
      };
      for (let i = 0; i < 4; i++) await runStep(client, i, step, { upstream: "api", sleep });
      assert.equal(asked.length, 1);
      // The clock stands still: each start is 50 ms after the one before, from the grant's wait of 10 ms.
      assert.deepEqual(log, ["sleep 10", "dispatch 0", "sleep 60", "dispatch 1", "sleep 110", "dispatch 2", "sleep 160", "dispatch 3"]);
    });
  });

  test("an abort while a leased permit's wait is slept ends the step at once, undispatched", async () => {
    await withLeases(PACED, async (client) => {
      await client.admit({ upstream: "api" });
      const controller = new AbortController();
      let dispatched = false;
      const run = runStep(
        client,
        0,
        async () => {
          dispatched = true;
          return "ok";
        },
        {
          upstream: "api",
          signal: controller.signal,
          // A sleep seam that ignores the signal: the abort still ends the wait.
          sleep: (waitMs) => {
            assert.equal(waitMs, 60);
            controller.abort(new Error("called off"));
            return new Promise<void>(() => undefined);
          },
        },
      );
      await assert.rejects(run, /called off/);
      assert.equal(dispatched, false);
    });
  });

  test("the runner queues a success started on a paced lease as patient, any other not", async (t: TestContext) => {
    for (const [grant, patient] of [
      [PACED, true],
      [FOUR, false],
    ] as const) {
      await withLeases(
        grant,
        async (client) => {
          const queued = t.mock.method(client, "queueOutcome");
          const sleep = async (): Promise<void> => undefined;
          for (let i = 0; i < 3; i++) await runStep(client, i, ok, { upstream: "api", sleep });
          const calls = queued.mock.calls.map((c) => c.arguments as unknown as [OutcomeInput, { patient?: boolean }]);
          assert.deepEqual(
            calls.map(([, options]) => options.patient),
            [patient, patient, patient],
            "the asking dispatch too: it is the lease's first start",
          );
        },
        true,
      );
    }
  });

  test("the runner queues the success of a dispatch holding a slot as urgent; a spare permit's holds none", async (t: TestContext) => {
    // A daemon grants no lease under a cap; one that did would free the
    // slot with the asking dispatch's outcome.
    await withLeases(
      { ...FOUR, holdsSlot: true },
      async (client) => {
        const queued = t.mock.method(client, "queueOutcome");
        for (let i = 0; i < 3; i++) await runStep(client, i, ok, { upstream: "api" });
        const calls = queued.mock.calls.map((c) => c.arguments as unknown as [OutcomeInput, { urgent?: boolean }]);
        assert.deepEqual(
          calls.map(([, options]) => options.urgent),
          [true, false, false],
        );
      },
      true,
    );
  });

  test("only an allowed answer holds a slot, whatever a refusal says", async () => {
    for (const [grant, want] of [
      [{ holdsSlot: true }, true],
      [{ allowed: false, reason: Reason.REASON_IN_FLIGHT_CAP, holdsSlot: true }, false],
    ] as const) {
      await withLeases(grant, async (client) => {
        assert.equal((await client.admit({ upstream: "api" })).holdsSlot, want);
        // The caller's own permits: the answer as the daemon sent it, read the same way.
        assert.equal((await client.admit({ upstream: "api", permits: 4 })).holdsSlot, want);
      });
    }
  });

  test("a clock that goes back ends the lease rather than stretching it", async () => {
    await withLeases(FOUR, async (client, asked, clock) => {
      await client.admit({ upstream: "api" });
      clock.ms -= 3_600_000;
      await client.admit({ upstream: "api" });
      assert.equal(asked.length, 2);
    });
  });

  test("a lease of a day is kept 1 s at most, as in every client", async () => {
    await withLeases({ permits: 4, lease: durationFromMs(86_400_000) }, async (client, asked, clock) => {
      await client.admit({ upstream: "api" });
      clock.ms += 999;
      await client.admit({ upstream: "api" });
      assert.equal(asked.length, 1);
      clock.ms += 1;
      await client.admit({ upstream: "api" });
      assert.equal(asked.length, 2);
    });
  });

  test("without leasePermits every dispatch asks, and asks for no more than one", async () => {
    const { target, server, asked } = await scripted(FOUR);
    const client = new SquawkClient(target, { callTimeoutMs: 5000 });
    try {
      for (let i = 0; i < 3; i++) await runStep(client, i, ok, { upstream: "api" });
      assert.deepEqual(
        asked.map((a) => a.permits),
        [0, 0, 0],
      );
    } finally {
      await client.close();
      server.forceShutdown();
    }
  });

  for (const bad of [0, 101, 1.5, Number.NaN]) {
    test(`leasePermits ${bad} is a RangeError naming it`, () => {
      assert.throws(() => new SquawkClient("127.0.0.1:1", { leasePermits: bad }), /leasePermits/);
    });
  }
});
