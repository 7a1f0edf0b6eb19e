// Secret redaction in the fallback: the shared vectors' exact outputs (the
// rules' corners among them), ordinary text, a time bound over hostile
// inputs, and idempotence.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { redact } from "../src/index";
import { VECTORS_PATH } from "./support/vectors";

interface RedactionVector {
  readonly name: string;
  readonly input: string;
  readonly redacted: string;
  readonly secrets: string[];
}
const vectors = (JSON.parse(readFileSync(VECTORS_PATH, "utf8")) as { redaction: RedactionVector[] }).redaction;

describe("redaction vectors, exactly", () => {
  test("there are vectors", () => assert.ok(vectors.length > 0));
  for (const v of vectors) {
    test(v.name, () => assert.equal(redact(v.input), v.redacted));
  }
});

describe("ordinary text is unchanged", () => {
  for (const text of [
    "Amadeus API error 400: INVALID CITY CODE: PARIS (check_in 2026-04-01)",
    "error code: 400",
    "status 503",
    "HTTP status 429: rate limit exceeded, retry-after: 3",
    "bypass: true, passed: 12 of 12, the session expired",
    "ssh://git@github.com/org/repo.git",
    "",
  ]) {
    test(JSON.stringify(text), () => assert.equal(redact(text), text));
  }
});

describe("redaction time", () => {
  // A safety bound, not a benchmark: every rule is linear, so a mebibyte of
  // any of these takes well under a second; a quadratic rule would take
  // minutes. The bound is generous so that a loaded machine never fails it.
  const MIB = 1 << 20;
  const units = [
    ...["eyJ-", "eyJa.", "eyJaaaaaaaa.", "sk-", "sk-a", "a_", "a-", "a", "-", "AKIA", "SG.a", "ya29."],
    ...["password=", 'password="', "password='a ", "password:", 'apiKey: "', "key ", "y:", "=", ":"],
    ...["Key=", "x_token=", "secret: ", 'password="a\\\\', "password=\\\\", "X-Amz-Signature="],
    ...['\\"password\\": \\"', "\\npassword", "Bearer ", "Token aB", "basic ", "x://a:", "x://"],
    ...["a://a:a@", ":a@", "@", "-----BEGIN PRIVATE KEY-----", "-----BEGIN ", "\\n", "\\u0041"],
    ...["é", "ééé key=", "\u2028", " ", "'", '"'],
  ];
  for (const unit of units) {
    test(`1 MiB of ${JSON.stringify(unit)}`, () => {
      for (const tail of ["", " =x"]) {
        const text = unit.repeat(Math.ceil(MIB / unit.length)).slice(0, MIB) + tail;
        const started = performance.now();
        redact(text);
        assert.ok(performance.now() - started < 5000, `${JSON.stringify(unit)} + ${JSON.stringify(tail)}`);
      }
    });
  }
});

describe("redaction is idempotent", () => {
  // Random texts made of pieces that steer the rules into their corners,
  // from a seeded generator so that a failure can be replayed.
  const pieces = [
    ...["password", "API_KEY", "apiKey", "XApiKey", "token", "Authorization", "key", "monkey", "pass"],
    ...["=", ": ", "=>", '":"', ":=", '"', "'", '\\"', "\\'", "\\n", "\\t", "\\x0b", "\\u00e9", "\\"],
    ...["Bearer ", "Basic ", "token ", "sk-", "sk_live_", "eyJ", "AKIA", "ghp_", "SG.", "ya29.", "hf_"],
    ...["-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----", "-----", "https://", "@", "/"],
    ...["[REDACTED]", " ", "\n", "&", ",", ";", "}", "<", "é", "\u2028", "\xa0", "K", "\u212a", "\u{1F511}"],
    ...['"x"', "'a b'", "BeArer", "xToken", "0", "Q0000000000000000", "abcdefgh", "-", "_", "."],
  ];
  let seed = 20260401;
  const random = (): number => {
    // mulberry32
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  test("on 20,000 random texts", () => {
    for (let n = 0; n < 20000; n++) {
      let text = "";
      for (let k = Math.floor(random() * 16); k > 0; k--) text += pieces[Math.floor(random() * pieces.length)];
      const once = redact(text);
      assert.equal(redact(once), once, JSON.stringify(text));
    }
  });
});
