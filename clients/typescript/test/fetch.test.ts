// The official `openai` npm package behind Squawk through squawkFetch: the
// real SDK, with its retries off, against a loopback stand-in of its API and
// a real daemon. Each call is admitted, reported with its headers, resent on
// the daemon's RETRY, and ends in the SDK's own error type when the policy
// ends it.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { PaceSource, sleep, SquawkClient, squawkFetch, SquawkInputError, type SquawkFetchOptions } from "../src/index";
import { completion, openaiError, ScriptedAPI, type Reply } from "./support/chatapi";
import { Daemon, freePort } from "./support/daemon";
import { logged, uniqueUpstream, type Asked } from "./support/upstreams";

const KEY = "sk-test-0000000000000000";
// "paced": one call in 20 s, so a second call within a step's second is shed.
const POLICY = "profiles:\n  paced:\n    rate_limit: {rate: 0.05, burst: 1}\n";
// OpenAI's dialect: 401 of 600 used, refilled in 4 s.
const QUOTA = {
  "x-ratelimit-limit-requests": "600",
  "x-ratelimit-remaining-requests": "199",
  "x-ratelimit-reset-requests": "4s",
};
const CHAT = completion("hello");

/** The SDK as a user writes it: `maxRetries` of its own (0 unless a test says), fetch through Squawk. */
function chatSdk(client: SquawkClient, baseURL: string, options: SquawkFetchOptions, maxRetries = 0) {
  const fetch = squawkFetch(client, options);
  return { sdk: new OpenAI({ apiKey: KEY, baseURL, maxRetries, fetch }), fetch };
}

async function ask(sdk: OpenAI): Promise<string | null | undefined> {
  const done = await sdk.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
  return done.choices[0]?.message.content;
}

/** What `call` rejected with; fails when it resolved. */
async function rejection(call: Promise<unknown>): Promise<unknown> {
  return call.then(
    (value) => assert.fail(`resolved with ${JSON.stringify(value)}`),
    (error: unknown) => error,
  );
}

describe("squawkFetch under the openai SDK, against the daemon", () => {
  let daemon: Daemon;
  let client: SquawkClient;
  let folder: string;
  const apis: ScriptedAPI[] = [];

  /** A scripted API, closed after the suite. */
  async function api(...script: Reply[]): Promise<ScriptedAPI> {
    const started = await ScriptedAPI.start(...script);
    apis.push(started);
    return started;
  }

  before(async () => {
    folder = mkdtempSync(join(tmpdir(), "squawk-fetch-"));
    writeFileSync(join(folder, "policy.yaml"), POLICY);
    daemon = await Daemon.start(undefined, { args: ["--policy", join(folder, "policy.yaml")] });
    // A generous deadline keeps a busy machine from failing these calls open.
    client = new SquawkClient(daemon.target, { callTimeoutMs: 5000 });
  });
  after(async () => {
    await client.close();
    await daemon.stop();
    await Promise.all(apis.map((a) => a.close()));
    rmSync(folder, { recursive: true, force: true });
  });

  test("a 429 is resent, the call succeeds, and the success's rate-limit headers pace the upstream", async () => {
    const upstream = uniqueUpstream("openai-chat");
    const chat = await api(
      { body: openaiError("slow down"), status: 429, headers: { "retry-after-ms": "20" } },
      { body: CHAT, headers: QUOTA },
    );
    // The user's code: the SDK with its own retries off, its fetch through Squawk.
    const fetch = squawkFetch(client, { upstream });
    const sdk = new OpenAI({ apiKey: KEY, baseURL: chat.baseURL, maxRetries: 0, fetch });
    assert.equal(await ask(sdk), "hello");
    assert.equal(chat.seen.length, 2);
    const [first, second] = chat.seen;
    assert.deepEqual([second?.path, second?.body], [first?.path, first?.body]); // the same request, twice
    assert.deepEqual(JSON.parse(first?.body ?? ""), { model: "m", messages: [{ role: "user", content: "hi" }] });
    // The success was reported with its quota: the pace now follows the headers.
    const [row] = await client.getUpstreams({ upstream });
    assert.equal(row?.paceSource, PaceSource.PACE_SOURCE_HEADERS);
    assert.equal(fetch.sdkRetries, 0);
  });

  test("a 400 reaches the SDK as its own BadRequestError after one request", async () => {
    const chat = await api({ body: openaiError("bad model"), status: 400 });
    const { sdk } = chatSdk(client, chat.baseURL, { upstream: uniqueUpstream("openai-400") });
    const error = await rejection(ask(sdk));
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    assert.equal(error.status, 400);
    assert.match(error.message, /bad model$/);
    assert.equal(chat.seen.length, 1);
  });

  test("x-should-retry: false on a 503 is obeyed: one request, the SDK's InternalServerError", async () => {
    const chat = await api({ body: openaiError("busy"), status: 503, headers: { "x-should-retry": "false" } });
    const { sdk } = chatSdk(client, chat.baseURL, { upstream: uniqueUpstream("openai-503") });
    const error = await rejection(ask(sdk));
    assert.ok(error instanceof OpenAI.InternalServerError, String(error));
    assert.equal(error.status, 503);
    assert.match(error.message, /busy$/);
    assert.equal(chat.seen.length, 1);
  });

  test("a shed call gets Squawk's own 503 and never reaches the upstream", async () => {
    const chat = await api({ body: CHAT }, { body: CHAT });
    // One call in 20 s, and a step may wait a second: the second call is shed.
    const options = { upstream: uniqueUpstream("openai-paced"), profile: "paced", deadlineMs: 1000 };
    const { sdk, fetch } = chatSdk(client, chat.baseURL, options, 2);
    assert.equal(await ask(sdk), "hello");
    const error = await rejection(ask(sdk));
    assert.ok(error instanceof OpenAI.InternalServerError, String(error));
    assert.equal(chat.seen.length, 1);
    assert.equal(error.headers?.get("x-squawk-reason"), "REASON_UPSTREAM_SATURATED");
    // x-should-retry: false keeps even an SDK left with retries on from resending.
    assert.equal(error.headers?.get("x-should-retry"), "false");
    assert.equal(fetch.sdkRetries, 0);
    assert.equal(error.code, "REASON_UPSTREAM_SATURATED");
    assert.equal(error.type, "squawk_refused");
    // The message is the pod's explanation.
    assert.ok(error.message.startsWith(`503 The pod `) && error.message.includes(options.upstream), error.message);
  });

  test("no response reaches the SDK as its APIConnectionError", async () => {
    const closed = `http://127.0.0.1:${await freePort()}/v1`;
    const { sdk } = chatSdk(client, closed, { upstream: uniqueUpstream("openai-down"), maxAttempts: 1 });
    const error = await rejection(ask(sdk));
    assert.ok(error instanceof OpenAI.APIConnectionError, String(error));
  });

  test("the SDK's abort signal cuts Squawk's wait before a resend", async () => {
    // The policy would resend after 20 s; the caller gives up first.
    const chat = await api({ body: openaiError("slow down"), status: 429, headers: { "retry-after": "20" } }, { body: CHAT });
    const { sdk } = chatSdk(client, chat.baseURL, { upstream: uniqueUpstream("openai-aborted") });
    const controller = new AbortController();
    const call = sdk.chat.completions.create(
      { model: "m", messages: [{ role: "user", content: "hi" }] },
      { signal: controller.signal },
    );
    while (chat.seen.length === 0) await sleep(10);
    const aborted = Date.now();
    controller.abort();
    const error = await rejection(call);
    assert.ok(error instanceof OpenAI.APIUserAbortError, String(error));
    assert.equal(chat.seen.length, 1);
    // Ended by the abort, not after the 20 s wait (a bound no busy machine comes near).
    assert.ok(Date.now() - aborted < 10_000, `${Date.now() - aborted} ms after the abort`);
  });

  test("an SDK left retrying on its own is counted and warned of once, naming the upstream", async () => {
    // Squawk ends each step at its first 503 (one attempt); the SDK resends.
    const busy: Reply = { body: openaiError("busy"), status: 503, headers: { "retry-after-ms": "1" } };
    const chat = await api(busy, busy, busy);
    const upstream = uniqueUpstream("openai-retrying");
    const warnings: Error[] = [];
    const listen = (warning: Error): void => void warnings.push(warning);
    process.on("warning", listen);
    try {
      const { sdk, fetch } = chatSdk(client, chat.baseURL, { upstream, maxAttempts: 1 }, 2);
      assert.ok((await rejection(ask(sdk))) instanceof OpenAI.InternalServerError);
      assert.equal(chat.seen.length, 3);
      assert.equal(fetch.sdkRetries, 2);
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on the next tick
    } finally {
      process.off("warning", listen);
    }
    const ours = warnings.filter((w) => w.message.includes("maxRetries: 0"));
    assert.equal(ours.length, 1, warnings.map((w) => w.message).join("\n"));
    assert.equal(ours[0]?.name, "SquawkSdkRetryWarning");
    assert.ok(ours[0]?.message.includes(JSON.stringify(upstream)), ours[0]?.message);
  });

  test("a byte body is resent as it was; a stream body is sent once", async () => {
    const busy: Reply = { body: openaiError("busy"), status: 503, headers: { "retry-after-ms": "1" } };
    const chat = await api(busy, { body: CHAT }, busy, { body: CHAT });
    const fetch = squawkFetch(client, { upstream: uniqueUpstream("plain-fetch") });
    const url = `${chat.baseURL}/chat/completions`;
    const bytes = new TextEncoder().encode('{"n":1}');
    const response = await fetch(url, { method: "POST", body: bytes });
    assert.equal(response.status, 200);
    assert.equal(((await response.json()) as { usage: { total_tokens: number } }).usage.total_tokens, 12);
    assert.deepEqual(
      chat.seen.map((s) => s.body),
      ['{"n":1}', '{"n":1}'],
    );
    const stream = new Blob(['{"n":2}']).stream();
    const once = await fetch(url, { method: "POST", body: stream, duplex: "half" } as RequestInit);
    assert.equal(once.status, 503); // its first failure is the last: the body is gone
    assert.equal(((await once.json()) as { error: { message: string } }).error.message, "busy");
    assert.deepEqual(
      chat.seen.map((s) => s.body),
      ['{"n":1}', '{"n":1}', '{"n":2}'],
    );
  });

  test("a success is reported with its usage tokens as its cost and its rate-limit headers; an event stream is never read", { timeout: 60_000 }, async () => {
    const message = { type: "message", content: [], usage: { input_tokens: 7, output_tokens: 5 } }; // Anthropic's usage
    const events = "event: message_start\ndata: {}\n\n";
    const chat = await api(
      { body: message, headers: QUOTA },
      { body: events, headers: { "content-type": "text/event-stream" }, open: true },
    );
    const asked: Asked = { events: [], reports: [] };
    const upstream = uniqueUpstream("reported");
    const fetch = squawkFetch(logged(client, asked), { upstream, capability: "chat", cost: 40 });
    const url = `${chat.baseURL}/messages`;
    const response = await fetch(url, { method: "POST", body: "{}" });
    assert.deepEqual(await response.json(), message); // the SDK's copy is whole
    // A stream that stays open is handed over at once: reading it would never end.
    const stream = await fetch(url, { method: "POST", body: "{}" });
    const reader = stream.body!.getReader();
    assert.equal(new TextDecoder().decode((await reader.read()).value), events);
    await reader.cancel();
    const outcomes = asked.reports.flatMap((r) => r.outcomes);
    assert.deepEqual(
      outcomes.map((o) => [o.upstream, o.capability, o.success, o.cost, o.estimatedCost, o.headers]),
      [
        [upstream, "chat", true, 12, 40, QUOTA],
        [upstream, "chat", true, 0, 40, {}],
      ],
    );
  });

  test("a fetch needs an upstream, and its options are checked before any request", () => {
    assert.throws(
      () => squawkFetch(client, { upstream: "" }),
      (e: unknown) => e instanceof SquawkInputError && e.field === "upstream",
    );
    assert.throws(
      () => squawkFetch(client, { upstream: "u", maxAttempts: 0 }),
      (e: unknown) => e instanceof SquawkInputError && e.field === "max_attempts",
    );
  });
});
