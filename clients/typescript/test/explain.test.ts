// Decision ids and explainDecision. Against the real daemon: an upstream
// whose breaker four 503s open refuses Admit with a decision id, the runner's
// failure carries it (and a DecideRetry FAIL's), explainDecision answers the
// decision, the breaker's state then and the transition before it, an id the
// daemon never gave is NOT_FOUND, and an allowed call has none. Against an
// in-test server: an id that is not at most 64 characters of printable ASCII
// is dropped to "", wherever an answer becomes a Decision or an Admission;
// the request as sent and its deadline. Without the daemon: no fallback,
// and fallback decisions carry "".
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, beforeEach, describe, test } from "node:test";
import {
  Server,
  ServerCredentials,
  status,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServiceError,
} from "@grpc/grpc-js";
import {
  AdmitResponse,
  DecideRetryBatchResponse,
  DecideRetryResponse,
  ExplainDecisionResponse,
  PolicyServiceService,
  type AdmitRequest,
  type DecideRetryBatchRequest,
  type DecideRetryRequest,
  type ExplainDecisionRequest,
} from "../src/gen/squawk/v1/policy";
import {
  Action,
  BreakerState,
  EventKind,
  Reason,
  runStep,
  SquawkClient,
  SquawkError,
  SquawkInputError,
  StepError,
  StepFailedError,
} from "../src/index";
import { Daemon, freePort } from "./support/daemon";

const UPSTREAM = "ts-explain";
const POLICY =
  "profiles:\n" +
  "  default:\n" +
  "    upstreams:\n" +
  `      ${UPSTREAM}:\n` +
  "        circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s, open_for: 60s}\n";

/** An id as the daemon gives it: a short printable token. */
const ID_SHAPE = /^[\x20-\x7e]{1,64}$/;

/** The StepFailedError `run` rejected with; fails when it resolved or rejected with anything else. */
async function stepFailure(run: Promise<unknown>): Promise<StepFailedError> {
  return run.then(
    (value) => assert.fail(`resolved with ${JSON.stringify(value)}`),
    (error: unknown) => {
      assert.ok(error instanceof StepFailedError, String(error));
      return error;
    },
  );
}

describe("decision ids and explainDecision against the daemon", () => {
  let daemon: Daemon;
  let client: SquawkClient;
  let folder: string;
  /** The Admit refusal's id, from the first test. */
  let admitId = "";
  /** The runner's refusal's id, from the second. */
  let runnerId = "";

  before(async () => {
    folder = mkdtempSync(join(tmpdir(), "squawk-explain-"));
    writeFileSync(join(folder, "policy.yaml"), POLICY);
    // A daemon of its own: its kept decisions and events are this file's alone.
    daemon = await Daemon.start(undefined, { args: ["--policy", join(folder, "policy.yaml")] });
    // A generous deadline keeps a busy machine from failing these calls; no
    // fallback, so that every answer is the daemon's.
    client = new SquawkClient(daemon.target, { callTimeoutMs: 5000, fallback: false });
    const failed = Array.from({ length: 4 }, () => ({ upstream: UPSTREAM, success: false, httpStatus: 503 }));
    assert.equal(await client.reportOutcome({ outcomes: failed }), 4);
  });
  after(async () => {
    await client.close();
    await daemon.stop();
    rmSync(folder, { recursive: true, force: true });
  });

  test("an Admit on the open upstream is refused with a decision id", async () => {
    const admission = await client.admit({ upstream: UPSTREAM });
    assert.equal(admission.allowed, false);
    assert.equal(admission.reason, Reason.REASON_CIRCUIT_OPEN);
    assert.equal(admission.breakerState, BreakerState.BREAKER_STATE_OPEN);
    assert.equal(admission.fallback, false);
    assert.match(admission.decisionId, ID_SHAPE);
    admitId = admission.decisionId;
  });

  test("the runner's failure for the refused dispatch carries the refusal's decision id", async () => {
    let called = 0;
    const step = async (): Promise<string> => {
      called += 1;
      return "never";
    };
    // The breaker admits again in 60 s, past the deadline: refused at once.
    const failure = await stepFailure(runStep(client, {}, step, { upstream: UPSTREAM, deadlineMs: 5000 }));
    assert.equal(called, 0);
    assert.equal(failure.calls, 0);
    assert.equal(failure.decision.action, Action.ACTION_FAIL);
    assert.equal(failure.decision.reason, Reason.REASON_CIRCUIT_OPEN);
    assert.equal(failure.decision.fallback, false);
    assert.match(failure.decision.decisionId, ID_SHAPE);
    // Each refusal is a decision of its own.
    assert.notEqual(failure.decision.decisionId, admitId);
    runnerId = failure.decision.decisionId;
  });

  test("explainDecision answers the refusal, the breaker OPEN then, and the transition before it", async () => {
    assert.notEqual(runnerId, "", "the runner's test ran first");
    for (const id of [runnerId, admitId]) {
      const why = await client.explainDecision(id);
      assert.equal(why.decisionId, id);
      assert.equal(why.rpc, "Admit");
      assert.equal(why.profile, "default");
      assert.equal(why.upstream, UPSTREAM);
      assert.equal(why.reason, Reason.REASON_CIRCUIT_OPEN);
      assert.equal(why.breakerState, BreakerState.BREAKER_STATE_OPEN);
      assert.ok(why.time instanceof Date);
      assert.ok(Math.abs(why.time.getTime() - Date.now()) < 60_000, `time ${why.time.toISOString()}`);
      const opened = why.events.filter((e) => e.before === "CLOSED" && e.after === "OPEN");
      assert.equal(opened.length, 1, JSON.stringify(why.events));
      assert.equal(opened[0]?.kind, EventKind.EVENT_KIND_BREAKER);
      assert.equal(opened[0]?.upstream, UPSTREAM);
    }
    assert.equal(client.fallbackCount, 0);
  });

  test("a step the daemon's DecideRetry FAILs on a named upstream carries that decision's id", async () => {
    const upstream = "ts-explain-terminal";
    const step = async (): Promise<never> => {
      throw new StepError("unauthorized", { httpStatus: 401 });
    };
    const failure = await stepFailure(runStep(client, {}, step, { upstream }));
    assert.equal(failure.calls, 1);
    assert.equal(failure.decision.reason, Reason.REASON_TERMINAL_STATUS);
    assert.equal(failure.decision.fallback, false);
    assert.match(failure.decision.decisionId, ID_SHAPE);
    const why = await client.explainDecision(failure.decision.decisionId);
    assert.equal(why.rpc, "DecideRetry");
    assert.equal(why.upstream, upstream);
    assert.equal(why.reason, Reason.REASON_TERMINAL_STATUS);
  });

  test("an id the daemon never gave is NOT_FOUND, a SquawkError, and not counted as a fallback", async () => {
    await assert.rejects(client.explainDecision("000000-1"), (e: unknown) => {
      assert.ok(e instanceof SquawkError, String(e));
      assert.ok(!(e instanceof SquawkInputError), String(e));
      assert.equal(e.code, status.NOT_FOUND);
      assert.equal(((e as SquawkError).cause as ServiceError).code, status.NOT_FOUND);
      return true;
    });
    assert.equal(client.fallbackCount, 0);
  });

  test("an empty id, or one over 64 characters, is a SquawkInputError naming decision_id", async () => {
    for (const id of ["", "x".repeat(65)]) {
      await assert.rejects(client.explainDecision(id), (e: unknown) => {
        assert.ok(e instanceof SquawkInputError, String(e));
        assert.equal(e.field, "decision_id");
        return true;
      });
    }
  });

  test("an allowed admit, and a decision the daemon kept nothing for, carry no id", async () => {
    const admission = await client.admit({ upstream: "ts-explain-fine" });
    assert.equal(admission.allowed, true);
    assert.equal(admission.decisionId, "");
    const untracked = await client.admit({});
    assert.equal(untracked.allowed, true);
    assert.equal(untracked.decisionId, "");
    const retry = await client.decideRetry({ attempt: 1, httpStatus: 503, upstream: "ts-explain-fine" });
    assert.equal(retry.action, Action.ACTION_RETRY);
    assert.equal(retry.decisionId, "");
  });
});

describe("decision ids from an in-test server", () => {
  const server = new Server();
  /** The decision_id every answer carries, set by each test. */
  let sent = "";
  /** Whether Admit answers allowed. */
  let allowed = false;
  const explained: ExplainDecisionRequest[] = [];
  const deadlinesLeftMs: number[] = [];
  let client: SquawkClient;

  before(async () => {
    const refuse = (_call: unknown, cb: sendUnaryData<never>): void => cb({ code: status.UNIMPLEMENTED } as ServiceError, null);
    const decision = (): DecideRetryResponse =>
      DecideRetryResponse.fromPartial({
        action: Action.ACTION_FAIL,
        reason: Reason.REASON_CIRCUIT_OPEN,
        explanation: "from the in-test server",
        decisionId: sent,
      });
    server.addService(PolicyServiceService, {
      classify: refuse,
      analyzeError: refuse,
      checkDispatch: refuse,
      getUpstreams: refuse,
      getEvents: refuse,
      reportOutcome: refuse,
      decideRetry: (_call: ServerUnaryCall<DecideRetryRequest, DecideRetryResponse>, cb: sendUnaryData<DecideRetryResponse>) =>
        cb(null, decision()),
      decideRetryBatch: (
        call: ServerUnaryCall<DecideRetryBatchRequest, DecideRetryBatchResponse>,
        cb: sendUnaryData<DecideRetryBatchResponse>,
      ) => cb(null, DecideRetryBatchResponse.fromPartial({ results: call.request.requests.map(() => ({ decision: decision() })) })),
      admit: (_call: ServerUnaryCall<AdmitRequest, AdmitResponse>, cb: sendUnaryData<AdmitResponse>) =>
        cb(
          null,
          AdmitResponse.fromPartial(
            allowed
              ? { allowed: true, reason: Reason.REASON_ADMITTED, permits: 1, decisionId: sent }
              : {
                  allowed: false,
                  reason: Reason.REASON_CIRCUIT_OPEN,
                  retryAfter: { seconds: 60, nanos: 0 },
                  breakerState: BreakerState.BREAKER_STATE_OPEN,
                  decisionId: sent,
                },
          ),
        ),
      explainDecision: (
        call: ServerUnaryCall<ExplainDecisionRequest, ExplainDecisionResponse>,
        cb: sendUnaryData<ExplainDecisionResponse>,
      ) => {
        explained.push(call.request);
        const deadline = call.getDeadline();
        deadlinesLeftMs.push((deadline instanceof Date ? deadline.getTime() : Number(deadline)) - Date.now());
        cb(null, ExplainDecisionResponse.fromPartial({ decisionId: call.request.decisionId, rpc: "Admit", upstream: "u" }));
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
    );
    // A decision's deadline: explainDecision gets a page's, not this.
    client = new SquawkClient(`127.0.0.1:${port}`, { callTimeoutMs: 50, fallback: false });
  });
  beforeEach(() => {
    allowed = false;
  });
  after(async () => {
    await client.close();
    server.forceShutdown();
  });

  /** The id each conversion keeps of `id`: Admit's refusal, the runner's refusal, DecideRetry's FAIL, a batch item's. */
  async function kept(id: string): Promise<string[]> {
    sent = id;
    const admission = await client.admit({ upstream: "u" });
    assert.equal(admission.allowed, false);
    const failure = await stepFailure(runStep(client, {}, async () => "never", { upstream: "u", deadlineMs: 1000 }));
    assert.equal(failure.calls, 0);
    const decision = await client.decideRetry({ attempt: 1, httpStatus: 503, upstream: "u" });
    const [result] = await client.decideRetryBatch({ requests: [{ attempt: 1, httpStatus: 503, upstream: "u" }] });
    return [admission.decisionId, failure.decision.decisionId, decision.decisionId, result?.decision?.decisionId ?? "absent"];
  }

  test("an id of at most 64 characters of printable ASCII is kept as sent", async () => {
    for (const id of ["3fa2c1-17", "x".repeat(64), " !~"]) assert.deepEqual(await kept(id), [id, id, id, id], JSON.stringify(id));
  });

  const hostile: Array<[string, string]> = [
    ["65 characters", "x".repeat(65)],
    ["a newline", "3fa2c1-17\n"],
    ["an escape sequence", "\u001b[31m3fa2c1-17"],
    ["a NUL", "3fa2c1\u0000-17"],
    ["a DEL", "3fa2c1-17\u007f"],
    ["non-ASCII", "3fa2c1-é"],
  ];
  for (const [name, id] of hostile) {
    test(`an id with ${name} is dropped to ""`, async () => {
      assert.deepEqual(await kept(id), ["", "", "", ""]);
    });
  }

  test("an allowed answer's id is dropped: the daemon refused nothing", async () => {
    sent = "3fa2c1-17";
    allowed = true;
    const admission = await client.admit({ upstream: "u" });
    assert.equal(admission.allowed, true);
    assert.equal(admission.decisionId, "");
  });

  test("explainDecision sends the id as given, with a getEvents page's deadline", async () => {
    const why = await client.explainDecision("3fa2c1-17");
    assert.deepEqual(explained.at(-1), { decisionId: "3fa2c1-17" });
    assert.equal(why.decisionId, "3fa2c1-17");
    assert.equal(why.rpc, "Admit");
    // 1 s when the call names none (the client's 50 ms is shorter).
    const left = deadlinesLeftMs.at(-1)!;
    assert.ok(left > 500 && left <= 1000, `deadline ${left} ms ahead`);
    await client.explainDecision("3fa2c1-17", { timeoutMs: 3000 });
    assert.ok(deadlinesLeftMs.at(-1)! > 2000, `deadline ${deadlinesLeftMs.at(-1)} ms ahead`);
  });

  test("an id that is not a string is a SquawkInputError naming decision_id, never sent", async () => {
    const before = explained.length;
    await assert.rejects(client.explainDecision(17 as unknown as string), (e: unknown) => {
      assert.ok(e instanceof SquawkInputError, String(e));
      assert.equal(e.field, "decision_id");
      return true;
    });
    assert.equal(explained.length, before);
  });
});

describe("decision ids without the daemon", () => {
  test("explainDecision has no fallback: UNAVAILABLE, not counted", async () => {
    const client = new SquawkClient(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 500 });
    try {
      await assert.rejects(client.explainDecision("3fa2c1-17"), (e: unknown) => e instanceof SquawkError && e.code === status.UNAVAILABLE);
      assert.equal(client.fallbackCount, 0);
    } finally {
      await client.close();
    }
  });

  test("the fallback's decisions and fail-open admissions carry no id", async () => {
    const client = new SquawkClient(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 200 });
    try {
      const decision = await client.decideRetry({ attempt: 1, httpStatus: 401, upstream: "u" });
      assert.equal(decision.fallback, true);
      assert.equal(decision.action, Action.ACTION_FAIL);
      assert.equal(decision.decisionId, "");
      const [result] = await client.decideRetryBatch({ requests: [{ attempt: 1, httpStatus: 401, upstream: "u" }] });
      assert.equal(result?.decision?.fallback, true);
      assert.equal(result?.decision?.decisionId, "");
      const admission = await client.admit({ upstream: "u" });
      assert.equal(admission.fallback, true);
      assert.equal(admission.decisionId, "");
      const step = async (): Promise<never> => {
        throw new StepError("unauthorized", { httpStatus: 401 });
      };
      const failure = await stepFailure(runStep(client, {}, step, { upstream: "u" }));
      assert.equal(failure.decision.fallback, true);
      assert.equal(failure.decision.decisionId, "");
    } finally {
      await client.close();
    }
  });
});
