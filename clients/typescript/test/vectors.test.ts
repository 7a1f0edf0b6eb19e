// Every classify, redaction, decide and invalid vector against the real
// daemon, which reads the real clock.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { status } from "@grpc/grpc-js";
import { SquawkClient, SquawkError, SquawkInputError } from "../src/index";
import { Daemon } from "./support/daemon";
import { assertMatches, classifyRequest, decideRequest, liveExpectation, loadVectors } from "./support/vectors";

const vectors = loadVectors();

describe("conformance vectors against the daemon", () => {
  let daemon: Daemon;
  let client: SquawkClient;

  before(async () => {
    daemon = await Daemon.start();
    // No fallback here: every answer must come from the daemon.
    client = new SquawkClient(daemon.target, { fallback: false, callTimeoutMs: 5000 });
  });

  after(async () => {
    client?.close();
    await daemon?.stop();
  });

  test("the vector file has cases of every kind", () => {
    assert.ok(vectors.classify.length > 0 && vectors.decide.length > 0 && vectors.invalid.length > 0);
  });

  for (const c of vectors.classify) {
    test(`classify: ${c.name}`, async () => {
      const answer = await client.classify(classifyRequest(c.request));
      assertMatches(answer, liveExpectation(c, c.expect), c.name);
    });
  }

  for (const c of vectors.redaction) {
    test(`redaction: ${c.name}`, async () => {
      const answer = await client.classify(classifyRequest({ errorMessage: c.input }));
      assert.equal(answer.redactedMessage, c.redacted);
      for (const secret of c.secrets) assert.ok(!answer.redactedMessage.includes(secret), secret);
    });
  }

  for (const c of vectors.decide) {
    test(`decide: ${c.name}`, async () => {
      const answer = await client.decideRetry(decideRequest(c.request));
      assert.equal(answer.fallback, false);
      assertMatches(answer, liveExpectation(c, c.expect), c.name);
    });
  }

  for (const c of vectors.invalid) {
    test(`invalid: ${c.name}`, async () => {
      const call =
        c.rpc === "Classify" ? client.classify(classifyRequest(c.request)) : client.decideRetry(decideRequest(c.request));
      await assert.rejects(call, (error: unknown) => {
        assert.ok(error instanceof SquawkInputError, `expected SquawkInputError, got ${String(error)}`);
        assert.ok(error instanceof SquawkError);
        assert.equal(error.code, status.INVALID_ARGUMENT);
        assert.equal(error.field, c.field);
        assert.match(error.message, new RegExp(`\\b${c.field}\\b`));
        return true;
      });
    });
  }

  test("no answer came from the fallback", () => {
    assert.equal(client.fallbackCount, 0);
  });
});
