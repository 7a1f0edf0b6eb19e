// getEvents against the real daemon: a 429 with a Retry-After begins the
// upstream's cool-down, one event with its cause; pages of one visit every
// event once, in order; an `after` the daemon cannot read is refused naming
// it. Then, against an in-test server, the page's deadline and the request
// as sent, and without the daemon: no fallback.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Server, ServerCredentials, status, type sendUnaryData, type ServerUnaryCall, type ServiceError } from "@grpc/grpc-js";
import { GetEventsResponse, PolicyServiceService, type GetEventsRequest } from "../src/gen/squawk/v1/policy";
import { EventKind, SquawkClient, SquawkError, SquawkInputError, type Event } from "../src/index";
import { Daemon, freePort } from "./support/daemon";

const UPSTREAM = "ts-events";

const isInputError = (field: string) => (e: unknown) => e instanceof SquawkInputError && e.field === field;

describe("getEvents against the daemon", () => {
  let daemon: Daemon;
  let client: SquawkClient;

  before(async () => {
    // A daemon of its own: its history holds this file's events alone.
    daemon = await Daemon.start();
    // A generous deadline keeps a busy machine from failing these calls.
    client = new SquawkClient(daemon.target, { callTimeoutMs: 5000, fallback: false });
  });
  after(async () => {
    client.close();
    await daemon.stop();
  });

  test("a 429 with Retry-After 30 begins one cool-down event, with its cause and end", async () => {
    const started = Date.now();
    const outcomes = [{ upstream: UPSTREAM, success: false, httpStatus: 429, headers: { "retry-after": "30" } }];
    assert.equal(await client.reportOutcome({ outcomes }), 1);
    const page = await client.getEvents({ upstream: UPSTREAM });
    assert.equal(page.events.length, 1, JSON.stringify(page.events));
    const [event] = page.events as [Event];
    assert.equal(event.kind, EventKind.EVENT_KIND_COOL_DOWN);
    assert.equal(event.profile, "default");
    assert.equal(event.upstream, UPSTREAM);
    assert.equal(event.before, "");
    assert.equal(event.after, "cooling for 30 s");
    assert.equal(event.cause, "HTTP 429 (throttled), Retry-After 30 s");
    assert.ok(event.number >= 1);
    assert.ok(event.time instanceof Date);
    assert.ok(event.time.getTime() >= started - 1000 && event.time.getTime() <= Date.now() + 1000, `time ${event.time.toISOString()}`);
    assert.ok(event.until instanceof Date);
    const leftMs = event.until.getTime() - Date.now();
    assert.ok(leftMs > 25_000 && leftMs <= 30_000, `until ${leftMs} ms ahead`);
    assert.ok(page.nextAfter >= event.number);
    assert.equal(page.lost, 0);

    // Further throttles while it runs extend it, and are no new event.
    const again = [{ upstream: UPSTREAM, success: false, httpStatus: 429, headers: { "retry-after": "31" } }];
    assert.equal(await client.reportOutcome({ outcomes: again }), 1);
    assert.equal((await client.getEvents({ upstream: UPSTREAM })).events.length, 1);
  });

  test("pages of one from after 0 visit every event once, in increasing number order", async () => {
    // More events: other cool-downs, and a breaker that ten failures open.
    for (const upstream of ["ts-events-a", "ts-events-b", "ts-events-c"]) {
      const outcomes = [{ upstream, success: false, httpStatus: 429, headers: { "retry-after": "20" } }];
      assert.equal(await client.reportOutcome({ outcomes }), 1);
    }
    const failures = Array.from({ length: 10 }, () => ({ upstream: "ts-events-breaker", success: false, httpStatus: 503 }));
    assert.equal(await client.reportOutcome({ outcomes: failures }), 10);

    const whole = await client.getEvents({ pageSize: 500 });
    assert.ok(whole.events.length >= 5, JSON.stringify(whole.events));
    assert.ok(whole.events.some((e) => e.kind === EventKind.EVENT_KIND_BREAKER && e.upstream === "ts-events-breaker"));
    assert.equal(whole.lost, 0);

    const seen: number[] = [];
    let at = 0;
    for (let page = 0; ; page += 1) {
      assert.ok(page <= whole.events.length + 100, "the pages never end");
      const answer = await client.getEvents({ after: at, pageSize: 1 });
      assert.equal(answer.lost, 0);
      assert.ok(answer.events.length <= 1);
      if (answer.events.length === 0) {
        assert.equal(answer.nextAfter, at);
        break;
      }
      const [event] = answer.events as [Event];
      assert.ok(event.number > at, `event ${event.number} after ${at}`);
      assert.equal(answer.nextAfter, event.number);
      seen.push(event.number);
      at = answer.nextAfter;
    }
    // Unfiltered, the history numbers them one after another, from 1.
    assert.deepEqual(seen, Array.from({ length: seen.length }, (_, i) => i + 1));
    for (const event of whole.events) assert.ok(seen.includes(event.number), `event ${event.number} not visited`);
  });

  test("after -1 is refused with INVALID_ARGUMENT, its details naming after", async () => {
    await assert.rejects(client.getEvents({ after: -1 }), (e: unknown) => {
      assert.ok(e instanceof SquawkInputError, String(e));
      assert.equal(e.code, status.INVALID_ARGUMENT);
      assert.equal(e.field, "after");
      const cause = e.cause as ServiceError;
      assert.equal(cause.code, status.INVALID_ARGUMENT);
      assert.ok(cause.details.startsWith("after:"), cause.details);
      return true;
    });
    assert.equal(client.fallbackCount, 0);
  });

  // `after` is an int64: a number past int32 reaches the daemon, which
  // refuses it as past its latest event; a fraction never leaves the client.
  const refused: Array<[string, Parameters<SquawkClient["getEvents"]>[0], string, "daemon" | "client"]> = [
    ["after past the latest event (and past int32)", { after: 2 ** 31 }, "after", "daemon"],
    ["a negative pageSize", { pageSize: -1 }, "page_size", "daemon"],
    ["an unknown profile", { profile: "nope" }, "profile", "daemon"],
    ["a fractional after", { after: 1.5 }, "after", "client"],
    ["an after past 2^53", { after: 2 ** 53 }, "after", "client"],
    ["a fractional pageSize", { pageSize: 1.5 }, "page_size", "client"],
    ["a null request", null as never, "request", "client"],
  ];
  for (const [name, input, field, by] of refused) {
    test(`${name} is a SquawkInputError naming ${field}, refused by the ${by}`, async () => {
      await assert.rejects(client.getEvents(input), (e: unknown) => {
        assert.ok(isInputError(field)(e), String(e));
        // The daemon's refusal carries its gRPC error; the client's has none.
        const cause = (e as SquawkInputError).cause as ServiceError | undefined;
        if (by === "daemon") assert.ok(cause?.details.startsWith(`${field}:`), String(cause?.details));
        else assert.equal(cause, undefined);
        return true;
      });
    });
  }
});

describe("getEvents against an in-test server", () => {
  const server = new Server();
  const requests: GetEventsRequest[] = [];
  const deadlinesLeftMs: number[] = [];
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
      getUpstreams: refuse,
      getEvents: (call: ServerUnaryCall<GetEventsRequest, GetEventsResponse>, cb: sendUnaryData<GetEventsResponse>) => {
        requests.push(call.request);
        const deadline = call.getDeadline();
        deadlinesLeftMs.push((deadline instanceof Date ? deadline.getTime() : Number(deadline)) - Date.now());
        cb(null, GetEventsResponse.fromPartial({ nextAfter: call.request.after + 7, lost: 3 }));
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
    );
    // A decision's deadline: a page of events gets a page's, not this.
    client = new SquawkClient(`127.0.0.1:${port}`, { callTimeoutMs: 50 });
  });
  after(() => {
    client.close();
    server.forceShutdown();
  });

  test("one page, as the daemon answers it, with a getUpstreams page's deadline", async () => {
    const page = await client.getEvents({ after: 2 ** 40, profile: "llm", upstream: "u", pageSize: 5 });
    assert.deepEqual(page, { events: [], nextAfter: 2 ** 40 + 7, lost: 3 });
    assert.deepEqual(requests.at(-1), { after: 2 ** 40, profile: "llm", upstream: "u", pageSize: 5 });
    // 1 s when the call names none (the client's 50 ms is shorter).
    const left = deadlinesLeftMs.at(-1)!;
    assert.ok(left > 500 && left <= 1000, `deadline ${left} ms ahead`);
    await client.getEvents({}, { timeoutMs: 3000 });
    assert.ok(deadlinesLeftMs.at(-1)! > 2000, `deadline ${deadlinesLeftMs.at(-1)} ms ahead`);
    assert.equal(client.fallbackCount, 0);
  });
});

describe("getEvents without the daemon", () => {
  test("it has no fallback: UNAVAILABLE, not counted", async () => {
    const client = new SquawkClient(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 500 });
    try {
      await assert.rejects(client.getEvents(), (e: unknown) => e instanceof SquawkError && e.code === status.UNAVAILABLE);
      assert.equal(client.fallbackCount, 0);
    } finally {
      client.close();
    }
  });
});
