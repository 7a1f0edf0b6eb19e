// paceHeaders: which of a success's response headers go with its Outcome
// (the same filter and bounds as the Python and Go runners, and the
// daemon's bounds on Outcome.headers).
import assert from "node:assert/strict";
import { test } from "node:test";
import { paceHeaders } from "../src/pacehints";
import type { HeaderSource } from "../src/steperror";

const long = "x-ratelimit-" + "a".repeat(256 - "x-ratelimit-".length);

const cases: { name: string; headers: () => HeaderSource; want: Record<string, string> }[] = [
  {
    name: "only rate-limit names, in any case",
    headers: () => ({ "X-RateLimit-Remaining": "1", "x-rate-limit-reset": "2", "Retry-After": "3", "content-type": "text/plain" }),
    want: { "X-RateLimit-Remaining": "1", "x-rate-limit-reset": "2" },
  },
  {
    name: "a fetch Headers is read through forEach",
    headers: () => new Headers({ "x-ratelimit-remaining-tokens": "40", "x-request-id": "r" }),
    want: { "x-ratelimit-remaining-tokens": "40" },
  },
  {
    name: "a name of 256 characters is kept, 257 is not",
    headers: () => ({ [long]: "1", [long + "b"]: "2" }),
    want: { [long]: "1" },
  },
  {
    name: "a value of 8,192 characters (code points) is kept, 8,193 is not",
    headers: () => ({ "x-ratelimit-a": "😀".repeat(8192), "x-ratelimit-b": "1".repeat(8193) }),
    want: { "x-ratelimit-a": "😀".repeat(8192) },
  },
  {
    name: "a lone surrogate, which is not UTF-8, is left out",
    headers: () => ({ "x-ratelimit-a": "\uD800", "x-ratelimit-\uDC00": "1", "x-ratelimit-c": "3" }),
    want: { "x-ratelimit-c": "3" },
  },
  {
    name: "a value that is not a string is left out",
    headers: () => ({ "x-ratelimit-a": ["1", "2"], "x-ratelimit-c": "3" }) as unknown as HeaderSource,
    want: { "x-ratelimit-c": "3" },
  },
  {
    name: "a hook that throws reports none",
    headers: () => {
      throw new Error("no headers");
    },
    want: {},
  },
];

for (const c of cases) {
  test(`paceHeaders: ${c.name}`, () => {
    assert.deepEqual(paceHeaders(c.headers, undefined), c.want);
  });
}

test("paceHeaders: no hook, no headers", () => {
  assert.deepEqual(paceHeaders(undefined, { headers: { "x-ratelimit-a": "1" } }), {});
});

test("paceHeaders: a flood keeps 64, and looks at the first 1,024 entries only", () => {
  const flood: Record<string, string> = {};
  for (let i = 0; i < 5000; i++) flood[`x-ratelimit-n${i}`] = "1";
  assert.equal(Object.keys(paceHeaders(() => flood, undefined)).length, 64);
  // 1,024 other names first: the rate-limit ones after them are not read.
  const late: Record<string, string> = {};
  for (let i = 0; i < 1024; i++) late[`x-other-${i}`] = "1";
  late["x-ratelimit-late"] = "1";
  assert.deepEqual(paceHeaders(() => late, undefined), {});
  const forEachLate = new Map(Object.entries(late));
  assert.deepEqual(paceHeaders(() => forEachLate, undefined), {});
});
