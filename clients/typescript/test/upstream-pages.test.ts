// getUpstreams reads every page of GetUpstreams: a pod tracking more than the
// daemon's page of 1,000 is listed whole, each name once, with the profile
// and upstream filters on every page. A server that never ends a listing is
// read a bounded number of pages, then refused (as botocore's paginator
// raises PaginationError rather than loop on a token without end).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Server, ServerCredentials, status, type sendUnaryData, type ServerUnaryCall, type ServiceError } from "@grpc/grpc-js";
import { MAX_UPSTREAM_PAGES } from "../src/client";
import { GetUpstreamsResponse, PolicyServiceService, type GetUpstreamsRequest } from "../src/gen/squawk/v1/policy";
import { SquawkClient, SquawkError, type OutcomeInput, type UpstreamState } from "../src/index";
import { Daemon } from "./support/daemon";

/** More than two pages of 1,000; every 250th is reported under the llm profile. */
const NAMES = Array.from({ length: 2500 }, (_, i) => `paged-${String(i).padStart(4, "0")}`);
const LLM = new Set(NAMES.filter((_, i) => i % 250 === 0));

/** How often each paged name is listed, as "profile/name". */
function counts(states: readonly UpstreamState[]): Map<string, number> {
  const seen = new Map<string, number>();
  for (const s of states) {
    if (!s.upstream.startsWith("paged-")) continue;
    const key = `${s.profile}/${s.upstream}`;
    seen.set(key, (seen.get(key) ?? 0) + 1);
  }
  return seen;
}

const once = (names: Iterable<string>, profile: (name: string) => string): Map<string, number> =>
  new Map([...names].map((name) => [`${profile(name)}/${name}`, 1]));

describe("getUpstreams against a daemon tracking 2,500 upstreams", () => {
  let daemon: Daemon;
  let client: SquawkClient;

  before(async () => {
    // A daemon of its own: these names would crowd another test's registry.
    daemon = await Daemon.start();
    // A generous deadline keeps a busy machine from failing these calls.
    client = new SquawkClient(daemon.target, { callTimeoutMs: 10_000, fallback: false });
    const outcomes: OutcomeInput[] = NAMES.map((upstream) => ({ upstream, profile: LLM.has(upstream) ? "llm" : "", success: true }));
    for (let start = 0; start < outcomes.length; start += 1000) {
      const batch = outcomes.slice(start, start + 1000);
      assert.equal(await client.reportOutcome({ outcomes: batch }), batch.length);
    }
  });
  after(async () => {
    client.close();
    await daemon.stop();
  });

  const profileOf = (name: string): string => (LLM.has(name) ? "llm" : "default");
  const cases: Array<[string, Parameters<SquawkClient["getUpstreams"]>[0], Map<string, number>]> = [
    ["every upstream, once", {}, once(NAMES, profileOf)],
    ["in pages of 300", { pageSize: 300 }, once(NAMES, profileOf)],
    ["one profile's", { profile: "llm" }, once(LLM, () => "llm")],
    ["one name", { upstream: NAMES[1234]! }, once([NAMES[1234]!], () => "default")],
    ["a name under another profile: none", { profile: "llm", upstream: NAMES[1234]! }, new Map()],
  ];
  for (const [name, input, want] of cases) {
    test(`getUpstreams lists ${name}`, async () => {
      assert.deepEqual(counts(await client.getUpstreams(input)), want);
    });
  }

  test("getUpstreamsPage answers one page, and its token the next", async () => {
    const first = await client.getUpstreamsPage();
    assert.equal(first.upstreams.length, 1000);
    assert.equal(first.truncated, true);
    assert.notEqual(first.nextPageToken, "");
    const next = await client.getUpstreamsPage({ pageToken: first.nextPageToken });
    const seen = new Set(first.upstreams.map((s) => s.upstream));
    assert.ok(!next.upstreams.some((s) => seen.has(s.upstream)));
  });
});

describe("getUpstreams against a server whose listing never ends", () => {
  const server = new Server();
  const requests: GetUpstreamsRequest[] = [];
  let client: SquawkClient;

  before(async () => {
    const refuse = (_call: unknown, cb: sendUnaryData<never>): void => cb({ code: status.UNIMPLEMENTED } as ServiceError, null);
    server.addService(PolicyServiceService, {
      classify: refuse,
      decideRetry: refuse,
      decideRetryBatch: refuse,
      analyzeError: refuse,
      checkDispatch: refuse,
      admit: refuse,
      reportOutcome: refuse,
      getUpstreams: (call: ServerUnaryCall<GetUpstreamsRequest, GetUpstreamsResponse>, cb: sendUnaryData<GetUpstreamsResponse>) => {
        requests.push(call.request);
        cb(
          null,
          GetUpstreamsResponse.fromPartial({ upstreams: [{ profile: "default", upstream: "again" }], truncated: true, nextPageToken: "again" }),
        );
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
    );
    client = new SquawkClient(`127.0.0.1:${port}`, { callTimeoutMs: 10_000, fallback: false });
  });
  after(() => {
    client.close();
    server.forceShutdown();
  });

  test("it stops after the bound with ABORTED, the filters sent on every page", async () => {
    await assert.rejects(
      client.getUpstreams({ profile: "llm", upstream: "u", includeFleet: true }),
      (e: unknown) => e instanceof SquawkError && e.code === status.ABORTED && e.message.includes(`${MAX_UPSTREAM_PAGES} pages`),
    );
    assert.equal(requests.length, MAX_UPSTREAM_PAGES);
    assert.ok(requests.every((r) => r.profile === "llm" && r.upstream === "u" && r.includeFleet));
  });
});
