// Every case of tests/vectors/leases.json (the rules of a lease's spare
// permits, which the Python and Go clients run too) against the client's
// lease table on a fake clock: grants, takes with the step's deadline left,
// and a failed dispatch's drop, for one (profile, upstream, capability).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { leaseKey, Leases, type Grant } from "../src/client";
import { repoRoot } from "./support/daemon";

interface LeaseEvent {
  readonly at: number;
  readonly grant?: Grant;
  readonly take?: { readonly deadlineMs?: number };
  readonly expect?: { readonly admissionId: string; readonly waitMs: number } | null;
  readonly revoke?: true;
}

interface LeaseCase {
  readonly name: string;
  readonly events: readonly LeaseEvent[];
}

const vectors = JSON.parse(readFileSync(join(repoRoot(), "tests", "vectors", "leases.json"), "utf8")) as {
  about: string;
  cases: LeaseCase[];
};

const PROFILE = "default";
const UPSTREAM = "api.example";
const KEY = leaseKey(PROFILE, UPSTREAM, "");
/** A clock that does not start at zero: a lease's times are the client's clock, not offsets from it. */
const EPOCH = 1_000_000;

describe("lease vectors (tests/vectors/leases.json)", () => {
  test("the file has cases", () => {
    assert.ok(vectors.cases.length > 0);
  });

  for (const c of vectors.cases) {
    test(c.name, () => {
      const clock = { ms: EPOCH };
      const leases = new Leases(() => clock.ms);
      c.events.forEach((event, i) => {
        const where = `events[${i}] at ${event.at} ms`;
        clock.ms = EPOCH + event.at;
        if (event.grant !== undefined) {
          leases.granted(KEY, event.grant, clock.ms);
        } else if (event.revoke === true) {
          // A failed dispatch: the client hears of it in decideRetry, for the upstream.
          leases.dropUpstream(PROFILE, UPSTREAM);
        } else if (event.take !== undefined) {
          const got = leases.take(KEY, event.take.deadlineMs);
          if (event.expect === null || event.expect === undefined) {
            assert.equal(got, undefined, `${where}: expected no permit`);
          } else {
            assert.ok(got !== undefined, `${where}: expected a permit`);
            assert.equal(got.admissionId, event.expect.admissionId, `${where}: admissionId`);
            assert.ok(Math.abs(got.waitMs - event.expect.waitMs) < 1e-6, `${where}: waited ${got.waitMs} ms, not ${event.expect.waitMs}`);
          }
        } else {
          assert.fail(`${where}: an event this test does not know: ${JSON.stringify(event)}`);
        }
      });
    });
  }
});
