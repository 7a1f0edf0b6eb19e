// A pod executor in Node: each worker runs steps through runStep against
// the test's fake upstream, one real HTTP call per dispatch, and prints
// what happened as JSON lines (tests/e2e/test_pod.py reads them; the Python
// and Go executors print the same lines).
//
//   node node_executor.js '{"target": ..., "base": ..., "upstream": ..., ...}'
"use strict";

const path = require("node:path");
const squawk = require(path.join(__dirname, "..", "..", "..", "clients", "typescript", "dist", "src", "index.js"));

function emit(worker, event, fields = {}) {
  process.stdout.write(JSON.stringify({ w: worker, ev: event, ...fields }) + "\n");
}

async function get(url, worker) {
  return fetch(url, { headers: { "X-Pod-Worker": worker }, signal: AbortSignal.timeout(30_000) });
}

async function work(client, config, worker) {
  const { base } = config;
  const gate = await get(base + config.path + "/gate", worker);
  await gate.arrayBuffer();
  if (gate.status !== 200) {
    emit(worker, "error", { message: `the gate answered ${gate.status}` });
    return false;
  }
  let retryPending = false;
  const step = async () => {
    const res = await get(base + config.path, worker);
    emit(worker, "dispatch", { status: res.status });
    if (res.status >= 400) throw await squawk.StepError.fromResponse(res);
    await res.arrayBuffer();
    return res.headers.get("X-Pod-Stop") === "1";
  };
  const options = {
    upstream: config.upstream,
    capability: worker,
    profile: config.profile,
    maxAttempts: config.max_attempts,
    onError: (info) => {
      const d = info.decision;
      retryPending = d.action === squawk.Action.ACTION_RETRY;
      const delayMs = d.delay === undefined ? 0 : squawk.durationToMs(d.delay);
      emit(worker, "decision", { action: d.action, reason: d.reason, delay_ms: Math.round(delayMs) });
      return "default";
    },
    // The runner sleeps after a RETRY decision, or after a refused Admit.
    sleep: (ms, signal) => {
      emit(worker, "wait", { kind: retryPending ? "retry" : "admission", ms });
      retryPending = false;
      return squawk.sleep(ms, signal);
    },
  };
  const ends = Date.now() + config.time_limit_s * 1000;
  for (let i = 0; i < config.max_steps; i++) {
    if (Date.now() > ends) {
      emit(worker, "error", { message: "time limit reached" });
      return false;
    }
    let stop;
    try {
      stop = await squawk.runStep(client, undefined, step, options);
    } catch (error) {
      if (!(error instanceof squawk.StepFailedError)) throw error;
      const d = error.decision;
      emit(worker, "step", { ok: false, action: d.action, reason: d.reason, calls: error.calls });
      continue;
    }
    emit(worker, "step", { ok: true });
    if (stop) break;
  }
  emit(worker, "done");
  return true;
}

async function main() {
  const config = JSON.parse(process.argv[2]);
  // A generous call timeout: the test counts what the daemon decided, so
  // no answer may come from the client's fallback on a busy machine.
  const client = new squawk.SquawkClient(config.target, { callTimeoutMs: 5000 });
  try {
    await client.getUpstreams(); // connect before the gate opens
    const results = await Promise.all(config.workers.map((w) => work(client, config, w)));
    emit("", "exit", { fallbacks: client.fallbackCount });
    process.exitCode = results.every(Boolean) ? 0 : 1;
  } finally {
    client.close();
  }
}

main().catch((error) => {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exitCode = 1;
});
