// Every case of tests/vectors/runner.json, run by runStep twice: against the
// real daemon, and with the daemon unreachable (the local fallback); a case
// with daemonAnswers runs once, against a loopback server answering that
// status; a case with admitAnswers runs once, against a loopback server
// answering Admit from the case's script.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Server, ServerCredentials, status, type ServiceError, type UntypedServiceImplementation } from "@grpc/grpc-js";
import {
  AdmitRequest,
  AdmitResponse,
  Criticality,
  criticalityFromJSON,
  Outcome as OutcomeMessage,
  PolicyServiceService,
  ReportOutcomeRequest,
} from "../src/gen/squawk/v1/policy";
import {
  DecideRetryRequest,
  runStep,
  SquawkClient,
  SquawkError,
  StepError,
  StepFailedError,
  type Decision,
  type DecideRetryInput,
  type DecisionSource,
  type RunStepOptions,
  type Tier,
} from "../src/index";
import { answering } from "./support/answering";
import { Daemon, freePort, repoRoot } from "./support/daemon";
import { assertMatches, durationMs, parseDuration, type Json, type JsonObject } from "./support/vectors";

type Params = Json;
/** A step's result: "done", or one carrying its real cost and response headers. */
type Result = string | { readonly cost: number; readonly headers: Record<string, string> };

interface StepScript {
  readonly ok?: true;
  /** On an ok step: the real cost and response headers its result carries, read by costOf and headersOf. */
  readonly cost?: number;
  readonly headers?: Record<string, string>;
  readonly fail?: { httpStatus?: number; transportFailure?: boolean; body?: string; headers?: Record<string, string> };
  readonly raise?: string;
}

interface Seen {
  readonly attempt: number;
  readonly correctionsUsed: number;
  readonly action: string;
  readonly reason: string;
}

type Outcome =
  | { readonly ok: true }
  | { readonly failed: { action: string; reason: string; calls: number } }
  | { readonly error: { code: string } };

interface Expect {
  readonly dispatches: Params[];
  readonly waitsMs?: number[];
  readonly requests?: JsonObject[];
  readonly onErrorSeen?: Seen[];
  /** admitAnswers cases: the Admit requests sent (proto3 JSON subsets; deadlineAtMost bounds the deadline). */
  readonly admitRequests?: JsonObject[];
  /** admitAnswers cases: every Outcome reported, in order (proto3 JSON subsets). */
  readonly reported?: JsonObject[];
  readonly outcome: Outcome;
}

interface RunnerCase {
  readonly name: string;
  readonly params: Params;
  readonly steps: StepScript[];
  readonly options?: JsonObject;
  readonly correct?: Params[];
  readonly onError?: Tier[];
  readonly expect: Expect;
  readonly fallback?: Expect;
  /** A gRPC status name: the case runs against a server answering every call with it. */
  readonly daemonAnswers?: string;
  /** AdmitResponses in proto3 JSON: the case runs against a server answering Admit with them in turn. */
  readonly admitAnswers?: JsonObject[];
}

const vectors = JSON.parse(readFileSync(join(repoRoot(), "tests", "vectors", "runner.json"), "utf8")) as {
  about: string;
  cases: RunnerCase[];
};

/** The case's options as runStep options; an option this test does not know fails the case. */
function stepOptions(options: JsonObject | undefined): RunStepOptions<Params, Result> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(options ?? {})) {
    switch (key) {
      case "maxAttempts":
      case "maxValidationRetries":
      case "hitlApproved":
      case "delegatedOrchestrator":
      case "capability":
      case "upstream":
      case "profile":
      case "cost":
      case "fairnessKey":
      case "fairnessWeight":
        out[key] = value;
        break;
      case "deadline":
        out["deadlineMs"] = durationMs(parseDuration(String(value)));
        break;
      case "criticality": {
        const level = criticalityFromJSON(value);
        assert.notEqual(level, Criticality.UNRECOGNIZED, `unknown criticality ${String(value)}`);
        out[key] = level;
        break;
      }
      default:
        assert.fail(`unknown runner option ${key}`);
    }
  }
  return out as RunStepOptions<Params, Result>;
}

/** What a scripted run did. */
interface RunRecord {
  readonly dispatches: Params[];
  readonly waitsMs: number[];
  readonly requests: DecideRetryRequest[];
  readonly onErrorSeen: Seen[];
  readonly decisions: Decision[];
  outcome?: Outcome;
  /** A script ran out (a step, hook or verdict asked for more often than listed). */
  overrun?: string;
}

const DURATION_FIELDS = new Set(["deadline"]);

/** Each listed field of each request, as the daemon receives it (after a wire round trip). */
function assertRequests(actual: DecideRetryRequest[], expected: JsonObject[]): void {
  assert.equal(actual.length, expected.length, "requests sent");
  expected.forEach((want, i) => {
    const onWire = DecideRetryRequest.decode(DecideRetryRequest.encode(actual[i] as DecideRetryRequest).finish());
    const fields = onWire as unknown as Record<string, unknown>;
    for (const [key, value] of Object.entries(want)) {
      const got = fields[key];
      if (DURATION_FIELDS.has(key)) {
        assert.ok(got !== undefined, `requests[${i}].${key}: absent`);
        assert.equal(durationMs(got as { seconds: number; nanos: number }), durationMs(parseDuration(String(value))));
      } else {
        assert.deepEqual(got, value, `requests[${i}].${key}`);
      }
    }
  });
}

async function runCase(c: RunnerCase, client: SquawkClient, fallback: boolean): Promise<RunRecord> {
  const rec: RunRecord = { dispatches: [], waitsMs: [], requests: [], onErrorSeen: [], decisions: [] };
  const steps = [...c.steps];
  const corrections = c.correct === undefined ? undefined : [...c.correct];
  const verdicts = c.onError === undefined ? undefined : [...c.onError];
  const overrun = (what: string): Error => {
    rec.overrun ??= what;
    return new Error(`the case's ${what} ran out`);
  };
  const source: DecisionSource = {
    fallbackProfile: client.fallbackProfile,
    admit: (input, options) => client.admit(input, options),
    reportOutcome: (input, options) => client.reportOutcome(input, options),
    queueOutcome: (outcome) => client.queueOutcome(outcome),
    async decideRetry(input: DecideRetryInput): Promise<Decision> {
      rec.requests.push(input as DecideRetryRequest);
      const decision = await client.decideRetry(input);
      rec.decisions.push(decision);
      return decision;
    },
  };
  const carries = c.steps.some((step) => step.cost !== undefined);
  const options: RunStepOptions<Params, Result> = {
    ...stepOptions(c.options),
    ...(carries
      ? {
          costOf: (result) => (typeof result === "string" ? Number.NaN : result.cost),
          headersOf: (result) => (typeof result === "string" ? {} : result.headers),
        }
      : {}),
    sleep: async (ms) => void rec.waitsMs.push(ms),
    ...(corrections === undefined
      ? {}
      : {
          correct: () => {
            const next = corrections.shift();
            if (next === undefined) throw overrun("correct list");
            return next;
          },
        }),
    ...(verdicts === undefined
      ? {}
      : {
          onError: (info) => {
            rec.onErrorSeen.push({
              attempt: info.attempt,
              correctionsUsed: info.correctionsUsed,
              action: info.decision.action,
              reason: info.decision.reason,
            });
            const next = verdicts.shift();
            if (next === undefined) throw overrun("onError list");
            return next;
          },
        }),
  };
  try {
    await runStep(
      source,
      c.params,
      async (params) => {
        rec.dispatches.push(structuredClone(params));
        const next = steps.shift();
        if (next === undefined) throw overrun("steps");
        if (next.raise !== undefined) throw new Error(next.raise);
        if (next.fail !== undefined) throw new StepError("scripted failure", next.fail);
        if (next.cost !== undefined) return { cost: next.cost, headers: { ...next.headers } };
        return "done";
      },
      options,
    );
    rec.outcome = { ok: true };
  } catch (error) {
    if (error instanceof SquawkError) {
      rec.outcome = { error: { code: status[error.code] } };
    } else {
      if (!(error instanceof StepFailedError)) throw error;
      const { action, reason } = error.decision;
      rec.outcome = { failed: { action, reason, calls: error.calls } };
    }
  }
  assert.ok(
    rec.decisions.every((d) => d.fallback === fallback),
    fallback ? "every decision came from the fallback" : "every decision came from the daemon",
  );
  return rec;
}

function check(rec: RunRecord, expect: Expect): void {
  assert.equal(rec.overrun, undefined, `the run asked for more than the case lists (${rec.overrun})`);
  assert.deepEqual(rec.dispatches, expect.dispatches, "dispatches");
  if (expect.waitsMs !== undefined) assert.deepEqual(rec.waitsMs, expect.waitsMs, "waitsMs");
  if (expect.requests !== undefined) assertRequests(rec.requests, expect.requests);
  if (expect.onErrorSeen !== undefined) assert.deepEqual(rec.onErrorSeen, expect.onErrorSeen, "onErrorSeen");
  assert.deepEqual(rec.outcome, expect.outcome, "outcome");
}

test("the runner vectors have cases", () => {
  assert.ok(vectors.cases.length > 0);
});

/** A case for the daemon and the fallback: neither a scripted status nor scripted admissions. */
const bothModes = (c: RunnerCase): boolean => c.daemonAnswers === undefined && c.admitAnswers === undefined;

describe("runner vectors against the daemon", () => {
  let daemon: Daemon;
  let client: SquawkClient;

  before(async () => {
    daemon = await Daemon.start();
    // No fallback here: every decision must come from the daemon.
    client = new SquawkClient(daemon.target, { fallback: false, callTimeoutMs: 5000 });
  });

  after(async () => {
    client?.close();
    await daemon?.stop();
  });

  for (const c of vectors.cases.filter(bothModes)) {
    test(c.name, async () => check(await runCase(c, client, false), c.expect));
  }
});

describe("runner vectors in the local fallback", () => {
  let client: SquawkClient;

  before(async () => {
    // A loopback port nothing listens on: every call is refused at once.
    client = new SquawkClient(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 2000 });
  });

  after(() => client?.close());

  for (const c of vectors.cases.filter(bothModes)) {
    test(c.name, async () => check(await runCase(c, client, true), c.fallback ?? c.expect));
  }
});

describe("runner vectors against a server answering a status", () => {
  for (const c of vectors.cases.filter((c) => c.daemonAnswers !== undefined)) {
    test(c.name, async () => {
      const code = status[c.daemonAnswers as keyof typeof status];
      assert.equal(typeof code, "number", `unknown status ${c.daemonAnswers}`);
      const { target, server } = await answering(code);
      const client = new SquawkClient(target, { callTimeoutMs: 5000 });
      try {
        const fallback = !("error" in c.expect.outcome);
        check(await runCase(c, client, fallback), c.expect);
        assert.equal(client.fallbackCount > 0, fallback, "a fallback is counted exactly when the run did not end in an error");
      } finally {
        client.close();
        server.forceShutdown();
      }
    });
  }
});

const ADMIT_DURATIONS = ["retryAfter", "wait", "lease"] as const;

/** A proto3 JSON AdmitResponse (Durations as "1.5s") as the message. */
function admitResponse(json: JsonObject): AdmitResponse {
  const fields: JsonObject = { ...json };
  for (const key of ADMIT_DURATIONS) {
    const value = fields[key];
    if (typeof value === "string") {
      const d = parseDuration(value);
      fields[key] = { seconds: d.seconds, nanos: d.nanos };
    }
  }
  return AdmitResponse.fromJSON(fields);
}

/** What the scripted server was asked. */
interface Scripted {
  readonly target: string;
  readonly server: Server;
  readonly admits: AdmitRequest[];
  readonly reported: OutcomeMessage[];
  /** Admit was called past the end of the script. */
  overrun: boolean;
}

/**
 * A loopback server answering Admit with `answers` in turn (a call past the
 * end is UNIMPLEMENTED, and marks the run), DecideRetry with UNAVAILABLE (the
 * client's fallback decides), ReportOutcome by recording; anything else UNIMPLEMENTED.
 */
async function admitting(answers: readonly JsonObject[]): Promise<Scripted> {
  const script = answers.map(admitResponse);
  const server = new Server();
  const impl: UntypedServiceImplementation = {};
  for (const method of Object.keys(PolicyServiceService)) {
    impl[method] = (_call: unknown, callback: (error: Partial<ServiceError>) => void) =>
      callback({ code: status.UNIMPLEMENTED, details: "not scripted" });
  }
  const scripted: Omit<Scripted, "target"> = { server, admits: [], reported: [], overrun: false };
  impl["decideRetry"] = (_call: unknown, callback: (error: Partial<ServiceError>) => void) =>
    callback({ code: status.UNAVAILABLE, details: "scripted: decide locally" });
  impl["admit"] = (
    call: { request: AdmitRequest },
    callback: (error: Partial<ServiceError> | null, response?: AdmitResponse) => void,
  ) => {
    scripted.admits.push(call.request);
    const next = script.shift();
    if (next === undefined) {
      scripted.overrun = true;
      callback({ code: status.UNIMPLEMENTED, details: "past the script's end" });
    } else {
      callback(null, next);
    }
  };
  impl["reportOutcome"] = (
    call: { request: ReportOutcomeRequest },
    callback: (error: Partial<ServiceError> | null, response?: { recorded: number }) => void,
  ) => {
    scripted.reported.push(...call.request.outcomes);
    callback(null, { recorded: call.request.outcomes.length });
  };
  server.addService(PolicyServiceService, impl);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, p) => (error ? reject(error) : resolve(p))),
  );
  return Object.assign(scripted, { target: `127.0.0.1:${port}` });
}

/** An Outcome against its expectation: a proto3 JSON subset, but "headers" is compared whole and "headerCount" counts them. */
function assertReported(got: OutcomeMessage, want: JsonObject, where: string): void {
  const { headers, headerCount, ...rest } = want;
  if (headers !== undefined) assert.deepEqual(got.headers, headers, `${where}: headers`);
  if (headerCount !== undefined) assert.equal(Object.keys(got.headers).length, headerCount, `${where}: headers reported`);
  assertMatches(got, rest, where);
}

/** Each Admit request against its expectation: proto3 JSON subsets, with deadlineAtMost a bound. */
function assertAdmitRequests(actual: AdmitRequest[], expected: JsonObject[]): void {
  assert.equal(actual.length, expected.length, "Admit requests sent");
  expected.forEach((want, i) => {
    const { deadlineAtMost, ...rest } = want;
    const got = actual[i] as AdmitRequest;
    if (deadlineAtMost !== undefined) {
      assert.ok(got.deadline !== undefined, `admitRequests[${i}].deadline: absent`);
      const ms = durationMs(got.deadline);
      const bound = durationMs(parseDuration(String(deadlineAtMost)));
      assert.ok(ms > 0 && ms <= bound, `admitRequests[${i}].deadline: ${ms} ms, expected above 0 and at most ${bound} ms`);
    }
    assertMatches(got, rest, `admitRequests[${i}]`);
  });
}

describe("runner vectors against a server scripting Admit", () => {
  for (const c of vectors.cases.filter((c) => c.admitAnswers !== undefined)) {
    test(c.name, async () => {
      const scripted = await admitting(c.admitAnswers ?? []);
      // Successes are reported in batches: closing the client must send them.
      const client = new SquawkClient(scripted.target, { callTimeoutMs: 5000, batchOutcomes: true });
      try {
        // DecideRetry answers UNAVAILABLE: every decision is the fallback's.
        const rec = await runCase(c, client, true);
        // Whatever the client still holds is sent before the check.
        await client.close();
        assert.equal(scripted.overrun, false, "Admit was called more often than the case lists");
        check(rec, c.expect);
        if (c.expect.admitRequests !== undefined) assertAdmitRequests(scripted.admits, c.expect.admitRequests);
        if (c.expect.reported !== undefined) {
          assert.equal(scripted.reported.length, c.expect.reported.length, "outcomes reported");
          c.expect.reported.forEach((want, i) => assertReported(scripted.reported[i] as OutcomeMessage, want, `reported[${i}]`));
        }
      } finally {
        client.close();
        scripted.server.forceShutdown();
      }
    });
  }
});
