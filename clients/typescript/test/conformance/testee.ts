// The TypeScript testee of the fallback conformance runner
// (tests/test_fallback_conformance.py), run with node on the built client:
//
//   node dist/test/conformance/testee.js < cases.jsonl
//
// It reads one case per line on stdin,
//   {"name": ..., "now": <Unix seconds>, "env": {...}, "request": <DecideRetryRequest JSON>}
// and writes one answer per line on stdout: {"name", "response"} (proto3
// JSON), {"name", "error": {"field"}} for a refused input, or {"name",
// "crash"}. It decides as the client's fallback does: the profile from the
// case's environment, the clock at the case's instant.
import { createInterface } from "node:readline";
import { fallbackProfileFromEnv } from "../../src/env";
import { SquawkInputError } from "../../src/errors";
import { fallbackDecide } from "../../src/fallback";
import { DecideRetryResponse } from "../../src/gen/squawk/v1/policy";
import { decideRequest, type JsonObject } from "../support/vectors";

interface Case {
  readonly name: string;
  readonly now?: number;
  readonly env?: Record<string, string>;
  readonly request: JsonObject;
}

const DURATION_FIELDS = new Set(["delay", "retryAfter"]);

/** ts-proto's JSON, with each Duration written as proto3 JSON writes it ("1.5s"). */
function proto3Json(value: unknown, key = ""): unknown {
  if (typeof value !== "object" || value === null) return value;
  const fields = value as Record<string, unknown>;
  if (DURATION_FIELDS.has(key)) return `${Number(fields["seconds"] ?? 0) + Number(fields["nanos"] ?? 0) / 1e9}s`;
  return Object.fromEntries(Object.entries(fields).map(([name, inner]) => [name, proto3Json(inner, name)]));
}

function answer(line: string): Record<string, unknown> {
  let c: Case;
  try {
    c = JSON.parse(line) as Case;
  } catch (error) {
    return { crash: `not a case: ${String(error)}` };
  }
  try {
    const profile = fallbackProfileFromEnv(c.env ?? {}, () => undefined);
    const decision = fallbackDecide(decideRequest(c.request), (c.now ?? 0) * 1000, profile);
    return { name: c.name, response: proto3Json(DecideRetryResponse.toJSON(decision)) };
  } catch (error) {
    if (error instanceof SquawkInputError) return { name: c.name, error: { field: error.field } };
    return { name: c.name, crash: String(error) };
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (line.trim() !== "") process.stdout.write(`${JSON.stringify(answer(line))}\n`);
});
