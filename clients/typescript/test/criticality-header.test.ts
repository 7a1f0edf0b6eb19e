// The criticality header (docs/clients/README.md, "The criticality header"),
// pinned by the shared vectors tests/vectors/criticality_header.json: each
// "read" case through criticalityFromHeaders, and each "write" case through
// squawkFetch against a loopback server that records the header it got,
// inside a step whose criticality is the case's level. The daemon is
// unreachable: admission fails open, so every request goes out.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Criticality, criticalityFromHeaders, runStep, SquawkClient, squawkFetch } from "../src/index";
import { freePort, repoRoot } from "./support/daemon";

interface ReadCase {
  readonly name: string;
  readonly headers: Record<string, string[]>;
  readonly level: string | null;
}
interface WriteCase {
  readonly name: string;
  readonly level: string | null;
  readonly headers: Record<string, string>;
  readonly sent: string | null;
}
interface HeaderVectors {
  readonly about: string;
  readonly read: ReadCase[];
  readonly write: WriteCase[];
}

const VECTORS = JSON.parse(
  readFileSync(join(repoRoot(), "tests", "vectors", "criticality_header.json"), "utf8"),
) as HeaderVectors;

/** A level's name without its prefix as the Criticality it names; null is none. */
function levelOf(name: string | null): Criticality | undefined {
  if (name === null) return undefined;
  const level = (Criticality as Record<string, string>)[`CRITICALITY_${name}`];
  assert.ok(level !== undefined, `the vectors name an unknown level ${name}`);
  return level as Criticality;
}

describe("criticalityFromHeaders, per tests/vectors/criticality_header.json", () => {
  test("the vectors have read cases", () => assert.ok(VECTORS.read.length >= 9));

  for (const c of VECTORS.read) {
    test(`read: ${c.name}`, () => {
      const want = levelOf(c.level);
      // WHATWG Headers: a repeated header arrives joined by ", ".
      const headers = new Headers();
      for (const [name, values] of Object.entries(c.headers)) for (const value of values) headers.append(name, value);
      assert.equal(criticalityFromHeaders(headers), want, "as Headers");
      // Node's IncomingHttpHeaders kind: the name as given, a value an array.
      assert.equal(criticalityFromHeaders(c.headers), want, "as a record of arrays");
      // ... or one string, as Node joins a repeated header.
      const joined = Object.fromEntries(Object.entries(c.headers).map(([name, values]) => [name, values.join(", ")]));
      assert.equal(criticalityFromHeaders(joined), want, "as a record of joined strings");
    });
  }

  test("an undefined value, and a name in any case, in a record", () => {
    assert.equal(criticalityFromHeaders({ "squawk-criticality": undefined }), undefined);
    assert.equal(criticalityFromHeaders({ "SQUAWK-CRITICALITY": "critical" }), Criticality.CRITICALITY_CRITICAL);
  });

  test("a letter that only Unicode folds into a level's name is not one", () => {
    // "ſ" (long s) upper-cases to "S".
    assert.equal(criticalityFromHeaders({ "squawk-criticality": "ſheddable" }), undefined);
  });
});

describe("squawkFetch sends the criticality in force, per tests/vectors/criticality_header.json", () => {
  let server: Server;
  let url: string;
  let client: SquawkClient;
  /** The squawk-criticality header of each request the server got, undefined when absent. */
  const got: (string | string[] | undefined)[] = [];

  before(async () => {
    server = createServer((request, response) => {
      const headers: IncomingHttpHeaders = request.headers;
      got.push(headers["squawk-criticality"]);
      request.resume();
      response.writeHead(200, { "content-type": "text/plain" }).end("ok");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    // Nothing listens there: every admission fails open.
    client = new SquawkClient(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 2000 });
  });
  after(async () => {
    await client.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  /** The header the server got for one request sent by `send` inside a step at `level`. */
  async function sentUnder(level: Criticality | undefined, send: () => Promise<Response>): Promise<unknown> {
    got.length = 0;
    const response = await runStep(client, undefined, send, level === undefined ? {} : { criticality: level });
    assert.equal(response.status, 200);
    assert.equal(await response.text(), "ok");
    assert.equal(got.length, 1);
    return got[0];
  }

  test("the vectors have write cases", () => assert.ok(VECTORS.write.length >= 4));

  for (const c of VECTORS.write) {
    test(`write: ${c.name}`, async () => {
      const fetch = squawkFetch(client, { upstream: "criticality-header" });
      const want = c.sent ?? undefined;
      const level = levelOf(c.level);
      assert.equal(await sentUnder(level, () => fetch(url, { headers: { ...c.headers } })), want, "headers as a record");
      const own = new Headers(c.headers);
      assert.equal(await sentUnder(level, () => fetch(url, { headers: own })), want, "headers as Headers");
      assert.deepEqual([...own], Object.entries(c.headers), "the caller's Headers unchanged");
      const request = new Request(url, { headers: c.headers });
      assert.equal(await sentUnder(level, () => fetch(request)), want, "a Request");
      assert.deepEqual([...request.headers], Object.entries(c.headers), "the caller's Request unchanged");
    });
  }

  test("a level inherited from an outer step goes out; none outside every step", async () => {
    const fetch = squawkFetch(client, { upstream: "criticality-header" });
    const inner = () => runStep(client, undefined, () => fetch(url), {});
    assert.equal(await sentUnder(Criticality.CRITICALITY_SHEDDABLE_PLUS, inner), "SHEDDABLE_PLUS");
    got.length = 0;
    assert.equal((await fetch(url)).status, 200);
    assert.deepEqual(got, [undefined]);
  });

  test("the request's own header wins in any case of its name", async () => {
    const fetch = squawkFetch(client, { upstream: "criticality-header" });
    const send = () => fetch(url, { headers: { "Squawk-Criticality": "critical" } });
    assert.equal(await sentUnder(Criticality.CRITICALITY_SHEDDABLE, send), "critical");
  });
});
