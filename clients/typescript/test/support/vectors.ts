// Reads the shared conformance vectors (tests/vectors/decisions.json) and
// compares answers with their proto3 JSON expectations.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Duration } from "../../src/gen/google/protobuf/duration";
import { ClassifyRequest, DecideRetryRequest } from "../../src/gen/squawk/v1/policy";
import { repoRoot } from "./daemon";

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export interface ClassifyCase {
  readonly name: string;
  readonly request: JsonObject;
  readonly expect: JsonObject;
  readonly fallback?: JsonObject | false;
  /** The Unix time (seconds) the case is decided at where a test sets the clock. */
  readonly now?: number;
  /** The answer at the real clock, later than every date in the case. */
  readonly live?: JsonObject;
}
export type DecideCase = ClassifyCase;
export interface InvalidCase {
  readonly name: string;
  readonly rpc: "Classify" | "DecideRetry";
  readonly request: JsonObject;
  readonly field: string;
}
export interface RedactionCase {
  readonly name: string;
  readonly input: string;
  readonly redacted: string;
  readonly secrets: string[];
}
export interface Vectors {
  readonly about: string;
  readonly classify: ClassifyCase[];
  readonly redaction: RedactionCase[];
  readonly decide: DecideCase[];
  readonly invalid: InvalidCase[];
}

export const VECTORS_PATH = join(repoRoot(), "tests", "vectors", "decisions.json");

export function loadVectors(): Vectors {
  const vectors = JSON.parse(readFileSync(VECTORS_PATH, "utf8")) as Vectors;
  for (const c of [...vectors.classify, ...vectors.decide]) {
    if ((c.now !== undefined || c.live !== undefined) && (c.now === undefined || typeof c.fallback === "object")) {
      throw new Error(`${VECTORS_PATH}: case ${JSON.stringify(c.name)} has live without now, or now with a fallback object`);
    }
  }
  return vectors;
}

/** What is answered at the real clock (the daemon's, a client's fallback): `live` when the case has it. */
export function liveExpectation(c: ClassifyCase, atCaseClock: JsonObject): JsonObject {
  return c.live ?? atCaseClock;
}

/** A proto3 JSON Duration ("1.5s", "-1s") as a Duration message. */
export function parseDuration(text: string): Duration {
  const m = /^(-)?([0-9]+)(?:\.([0-9]{1,9}))?s$/.exec(text);
  if (m === null) throw new Error(`${JSON.stringify(text)} is not a proto3 JSON duration`);
  const sign = m[1] === "-" ? -1 : 1;
  const seconds = Number(m[2]);
  const nanos = Number((m[3] ?? "").padEnd(9, "0"));
  return { seconds: sign * seconds || 0, nanos: sign * nanos || 0 };
}

export function durationMs(d: Duration): number {
  return d.seconds * 1000 + d.nanos / 1e6;
}

const DURATION_FIELDS = new Set(["deadline", "delay", "retryAfter"]);

/** ts-proto's fromJSON reads Durations as {seconds, nanos}; convert the proto3 JSON strings first. */
function withDurations(request: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(request)) {
    if (DURATION_FIELDS.has(key) && typeof value === "string") {
      const d = parseDuration(value);
      out[key] = { seconds: d.seconds, nanos: d.nanos };
    } else {
      out[key] = value;
    }
  }
  return out;
}

export function decideRequest(json: JsonObject): DecideRetryRequest {
  return DecideRetryRequest.fromJSON(withDurations(json));
}

export function classifyRequest(json: JsonObject): ClassifyRequest {
  return ClassifyRequest.fromJSON(withDurations(json));
}

function isDuration(value: unknown): value is Duration {
  return typeof value === "object" && value !== null && "seconds" in value && "nanos" in value;
}

/**
 * Assert that `actual` (a generated message) has every field `expected`
 * lists. Durations compare as milliseconds and must be present; enums are
 * their names (string enums), as in proto3 JSON; nested messages recurse;
 * null means the field is unset.
 */
export function assertMatches(actual: object, expected: JsonObject, where: string): void {
  const fields = actual as Record<string, unknown>;
  for (const [key, want] of Object.entries(expected)) {
    const got = fields[key];
    const at = `${where}: ${key}`;
    if (want === null) {
      assert.equal(got, undefined, `${at}: expected it unset`);
    } else if (DURATION_FIELDS.has(key)) {
      assert.ok(isDuration(got), `${at}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)} (absent)`);
      assert.equal(durationMs(got), durationMs(parseDuration(String(want))), `${at} (ms)`);
    } else if (typeof want === "object" && want !== null && !Array.isArray(want)) {
      assert.ok(typeof got === "object" && got !== null, `${at}: expected a message, got ${JSON.stringify(got)}`);
      assertMatches(got, want, at);
    } else {
      assert.deepEqual(got, want, at);
    }
  }
}
