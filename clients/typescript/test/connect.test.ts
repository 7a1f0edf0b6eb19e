// A client starts connecting when it is built, against the real daemon: a
// first call that had to connect inside its 50 ms would get the fallback's
// answer instead of the daemon's.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connectivityState } from "@grpc/grpc-js";
import { Action, SquawkClient } from "../src/index";
import { Daemon, freePort } from "./support/daemon";

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

let daemon: Daemon;

before(async () => {
  daemon = await Daemon.start();
});

after(async () => {
  await daemon?.stop();
});

test("a client given no call reaches READY on its own", async (t) => {
  const client = new SquawkClient(daemon.target);
  t.after(() => client.close());
  // Generous for a loaded machine: a lazy channel would stay IDLE forever.
  const until = Date.now() + 10_000;
  let state = client.connectivityState();
  while (state !== connectivityState.READY) {
    assert.ok(Date.now() < until, `state ${connectivityState[state]} after 10 s, want READY`);
    await delay(20);
    state = client.connectivityState();
  }
});

test("without a daemon the client is still built, and the fallback answers", async (t) => {
  const client = new SquawkClient(`127.0.0.1:${await freePort()}`);
  t.after(() => client.close());
  const decision = await client.decideRetry({ attempt: 1, httpStatus: 503 });
  assert.equal(decision.fallback, true);
  assert.equal(decision.action, Action.ACTION_RETRY);
});

test("given no target, the client dials SQUAWK_ADDRESS; a target given wins", async (t) => {
  const saved = process.env.SQUAWK_ADDRESS;
  t.after(() => {
    if (saved === undefined) delete process.env.SQUAWK_ADDRESS;
    else process.env.SQUAWK_ADDRESS = saved;
  });
  process.env.SQUAWK_ADDRESS = daemon.target;
  const fromEnv = new SquawkClient(undefined, { callTimeoutMs: 5_000 });
  t.after(() => fromEnv.close());
  assert.equal(fromEnv.target, daemon.target);
  assert.equal((await fromEnv.decideRetry({ attempt: 1, httpStatus: 503 })).fallback, false);
  const explicit = new SquawkClient(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 5_000 });
  t.after(() => explicit.close());
  assert.equal((await explicit.decideRetry({ attempt: 1, httpStatus: 503 })).fallback, true);
  process.env.SQUAWK_ADDRESS = "";
  const byDefault = new SquawkClient();
  t.after(() => byDefault.close());
  assert.equal(byDefault.target, "127.0.0.1:50051");
});
