// One executor of the outcome benchmark, in TypeScript's client (plain
// JavaScript on its built dist/, so it needs no build of its own).
//
// Poisson arrivals of steps at the rates of its phases; each step is one
// distinct GET to the upstream, run through runStep (modes "stateless" and
// "pod") or a tenacity-style loop (mode "none"). When its last step ends it
// writes the same JSON as bench/outcome/executor.py. The config is one JSON
// argument; SQUAWK_TS_CLIENT names the client's built entry point.
"use strict";
const fs = require("node:fs");
const http = require("node:http");
const squawk = require(process.env.SQUAWK_TS_CLIENT);
const { InterceptingCall } = require(require.resolve("@grpc/grpc-js", { paths: [process.env.SQUAWK_TS_CLIENT] }));

const cfg = JSON.parse(process.argv[2]);
const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 });
const url = new URL(cfg.url);
// The default profile's backoff bounds, for the loop without Squawk.
const BACKOFF_INITIAL_MS = 500;
const BACKOFF_MAX_MS = 10_000;

// A seeded generator (mulberry32), so a run's arrivals repeat.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = rng(cfg.seed);
const expo = (rate) => -Math.log(1 - random()) / rate;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

const calls = {};
function counted(second, failed) {
  const row = (calls[second] ??= [0, 0]);
  row[0] += 1;
  if (failed) row[1] += 1;
}

// Every RPC the client sends passes here: one that ends in an error is a
// call the daemon did not decide (the client answered for it).
function countingInterceptor(options, nextCall) {
  return new InterceptingCall(nextCall(options), {
    start(metadata, _listener, next) {
      next(metadata, {
        onReceiveStatus(status, nextStatus) {
          counted(Math.floor(Date.now() / 1000), status.code !== 0);
          nextStatus(status);
        },
      });
    },
  });
}
// Pod mode: success reports in batches and leased permits, as a busy
// executor should run (the Go and Python runners do both by themselves).
const client =
  cfg.mode === "none"
    ? undefined
    : new squawk.SquawkClient(cfg.daemon, {
        channelOptions: { interceptors: [countingInterceptor] },
        batchOutcomes: true,
        leasePermits: 10,
      });

// The client as one step's runner sees it: a call during which the client
// counted a fallback (or a fail-open) marks the step (`flag.undecided`).
function sourceFor(flag) {
  const wrap = (name) => async (input, options) => {
    const before = client.fallbackCount;
    try {
      return await client[name](input, options);
    } finally {
      if (client.fallbackCount > before) flag.undecided = true;
    }
  };
  return {
    decideRetry: wrap("decideRetry"),
    admit: wrap("admit"),
    reportOutcome: wrap("reportOutcome"),
    queueOutcome: (outcome) => client.queueOutcome(outcome),
    get fallbackProfile() {
      return client.fallbackProfile;
    },
  };
}

function get(stepId, signal) {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: url.hostname, port: url.port, path: `${url.pathname}?step=${stepId}`, agent, headers: { "x-executor": cfg.id }, signal },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
  });
}

async function attemptOnce(stepId, signal) {
  let res;
  try {
    res = await get(stepId, signal);
  } catch (error) {
    throw new squawk.StepError(String(error), { transportFailure: true, cause: error });
  }
  const headers = {};
  for (const [k, v] of Object.entries(res.headers)) headers[k] = Array.isArray(v) ? v.join(", ") : String(v);
  if (res.status !== 200) {
    throw new squawk.StepError(`HTTP ${res.status}`, { httpStatus: res.status, body: new Uint8Array(res.body), headers });
  }
  // A success's headers: runStep reports their rate-limit headers (headersOf).
  return headers;
}

// The loop a team writes without Squawk: full-jitter exponential backoff,
// the Retry-After when the answer has one, the same budget and deadline.
async function tenacity(attempt, signal) {
  const started = Date.now();
  for (let n = 1; ; n++) {
    try {
      await attempt();
      return [true, ""];
    } catch (error) {
      if (n >= cfg.max_attempts) return [false, "ATTEMPTS_EXHAUSTED"];
      let wait = random() * Math.min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * 2 ** (n - 1));
      const ra = Number(error?.headers?.["retry-after"]);
      if (error?.headers?.["retry-after"] !== undefined && Number.isFinite(ra) && ra >= 0) wait = ra * 1000;
      if (Date.now() - started + wait > cfg.deadline_s * 1000) return [false, "DEADLINE_EXCEEDED"];
      await sleep(wait);
      if (signal.aborted) return [false, "DEADLINE_EXCEEDED"];
    }
  }
}

const steps = [];
async function one(stepId) {
  const start = Date.now() / 1000;
  let attempts = 0;
  const flag = { undecided: false };
  // The step's deadline: it aborts the HTTP call and the runner's waits.
  const signal = AbortSignal.timeout(cfg.deadline_s * 1000);
  const step = async (sid) => {
    attempts += 1;
    return attemptOnce(sid, signal);
  };
  let ok = true;
  let reason = "";
  try {
    if (client === undefined) {
      [ok, reason] = await tenacity(() => step(stepId), signal);
    } else {
      const options = { maxAttempts: cfg.max_attempts, deadlineMs: cfg.deadline_s * 1000, signal, headersOf: (headers) => headers };
      if (cfg.mode === "pod") options.upstream = cfg.upstream;
      if (cfg.criticality) options.criticality = squawk.Criticality[`CRITICALITY_${cfg.criticality}`];
      if (cfg.fairness_key) options.fairnessKey = cfg.fairness_key;
      if (cfg.fairness_weight) options.fairnessWeight = cfg.fairness_weight;
      await squawk.runStep(sourceFor(flag), stepId, step, options);
    }
  } catch (error) {
    ok = false;
    if (error instanceof squawk.StepFailedError) {
      const r = error.decision.reason;
      reason = (squawk.Reason?.[r] ?? String(r)).replace(/^REASON_/, "");
    } else if (signal.aborted) {
      reason = "DEADLINE_EXCEEDED";
    } else {
      reason = error?.name ?? "Error";
    }
  }
  steps.push([start, Date.now() / 1000, ok, reason, attempts, flag.undecided]);
}

// Say ready, then wait for the wall time the first phase starts at.
async function started() {
  fs.writeFileSync(cfg.ready, "ready\n");
  for (;;) {
    try {
      const t0 = Number.parseFloat(fs.readFileSync(cfg.start, "utf8"));
      if (Number.isFinite(t0)) return t0;
    } catch {
      // not written yet
    }
    await sleep(10);
  }
}

async function main() {
  const t0 = await started();
  const pending = new Set();
  let n = 0;
  for (const [offset, until, rate] of cfg.phases) {
    const start = t0 + offset;
    const end = t0 + until;
    if (!(rate > 0)) continue;
    for (let t = start + expo(rate); t < end; t += expo(rate)) {
      const d = t * 1000 - Date.now();
      if (d > 0) await sleep(d);
      n += 1;
      const p = one(`${cfg.id}-${n}`).finally(() => pending.delete(p));
      pending.add(p);
    }
  }
  while (pending.size > 0) await Promise.all([...pending]);
  await client?.close();
  agent.destroy();
  fs.writeFileSync(cfg.out, JSON.stringify({ id: cfg.id, steps, calls }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
