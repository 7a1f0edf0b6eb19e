// Spare permits (SquawkClientOptions.leasePermits) against a loopback server
// that scripts each Admit answer and counts the calls: what the daemon
// granted is used, for the same (profile, upstream, capability) only, never
// after the lease, and never from a grant the client should not trust.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
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
} from "../src/index";
import { PolicyServiceService } from "../src/gen/squawk/v1/policy";

type DeepPartialAdmit = Partial<AdmitResponse>;
type Callback<T> = (error: Partial<ServiceError> | null, response?: T) => void;

/** Admits with `grant` (over a closed, allowed answer) and records every Admit request; DecideRetry is UNAVAILABLE. */
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
): Promise<void> {
  const { target, server, asked } = await scripted(grant);
  const clock = { ms: 1_000_000 };
  const client = new SquawkClient(target, { callTimeoutMs: 5000, leasePermits: 4, now: () => clock.ms });
  try {
    await body(client, asked, clock);
  } finally {
    await client.close();
    server.forceShutdown();
  }
}

const FOUR = { permits: 4, lease: durationFromMs(1000) };
const ok = async (): Promise<string> => "ok";

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
    ["a paced grant", { ...FOUR, wait: durationFromMs(20) }, 1],
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
