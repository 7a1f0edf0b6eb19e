// The packed tarball, installed into an empty folder, is a working package:
// its entry point loads from CommonJS and ESM with exactly the public names,
// it decides (in the fallback) with only its declared dependencies, a
// TypeScript user's code type-checks against it, and internals stay private.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { freePort } from "./support/daemon";
import { PUBLIC_VALUES } from "./support/surface";

const pkgDir = join(__dirname, "..", "..");
const tsc = join(pkgDir, "node_modules", "typescript", "bin", "tsc");

function run(command: string, args: string[], cwd: string): string {
  return execFileSync(command, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 120_000 });
}

interface PackInfo {
  readonly filename: string;
  readonly files: Array<{ path: string }>;
}

describe("the packed package", { timeout: 240_000 }, () => {
  let scratch: string;
  let consumer: string;
  let packed: PackInfo;

  before(() => {
    scratch = mkdtempSync(join(tmpdir(), "squawk-ts-pack-"));
    // dist is already built (npm test runs after npm run build); prepack would rebuild it under the running tests.
    const out = run("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", scratch], pkgDir);
    [packed] = JSON.parse(out) as PackInfo[];
    assert.ok(packed, "npm pack said nothing");
    consumer = join(scratch, "consumer");
    mkdirSync(consumer);
    writeFileSync(join(consumer, "package.json"), JSON.stringify({ name: "consumer", version: "1.0.0", private: true }));
    run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", join(scratch, packed.filename)], consumer);
  });

  after(() => {
    if (scratch !== undefined) rmSync(scratch, { recursive: true, force: true });
  });

  test("holds the compiled package, its sources and README, and no tests or build scripts", () => {
    const paths = packed.files.map((f) => f.path);
    for (const needed of ["package.json", "README.md", "dist/src/index.js", "dist/src/index.d.ts", "dist/src/gen/squawk/v1/policy.js"]) {
      assert.ok(paths.includes(needed), `${needed} is missing from the tarball`);
    }
    const stray = paths.filter((p) => /^(dist\/test|test|scripts|protos|node_modules)\//.test(p));
    assert.deepEqual(stray, []);
  });

  test("loads from CommonJS with exactly the public names, and decides in the fallback", async () => {
    const port = await freePort();
    writeFileSync(
      join(consumer, "use.cjs"),
      `const squawk = require("@squawk/client");
       const client = new squawk.SquawkClient("127.0.0.1:${port}", { callTimeoutMs: 2000 });
       client.decideRetry({ attempt: 1, httpStatus: 503 }).then((d) => {
         client.close();
         console.log(JSON.stringify({ names: Object.keys(squawk).sort(), action: d.action, reason: d.reason, fallback: d.fallback }));
       });`,
    );
    const out = JSON.parse(run(process.execPath, ["use.cjs"], consumer)) as Record<string, unknown>;
    assert.deepEqual(out, {
      names: [...PUBLIC_VALUES].sort(),
      action: "ACTION_RETRY",
      reason: "REASON_TRANSIENT_STATUS",
      fallback: true,
    });
  });

  test("loads from ESM with named imports", () => {
    writeFileSync(
      join(consumer, "use.mjs"),
      `import { Action, runStep, SquawkClient } from "@squawk/client";
       console.log(JSON.stringify([Action.ACTION_RETRY, typeof runStep, typeof SquawkClient]));`,
    );
    assert.deepEqual(JSON.parse(run(process.execPath, ["use.mjs"], consumer)), ["ACTION_RETRY", "function", "function"]);
  });

  test("keeps its modules private", () => {
    writeFileSync(
      join(consumer, "deep.cjs"),
      `try { require("@squawk/client/dist/src/hooks"); console.log("reachable"); } catch (e) { console.log(e.code); }`,
    );
    assert.equal(run(process.execPath, ["deep.cjs"], consumer).trim(), "ERR_PACKAGE_PATH_NOT_EXPORTED");
  });

  test("type-checks a TypeScript user's code", () => {
    writeFileSync(
      join(consumer, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { strict: true, noEmit: true, module: "node16", moduleResolution: "node16", target: "ES2022", skipLibCheck: true },
        files: ["use.ts"],
      }),
    );
    writeFileSync(
      join(consumer, "use.ts"),
      `import { Action, runStep, SquawkClient, SquawkInputError, squawkFetch, type ErrorInfo, type Tier } from "@squawk/client";
       // What an SDK's fetch option takes, in the DOM's own types.
       export function sdkFetch(client: SquawkClient): [(input: string | URL | Request, init?: RequestInit) => Promise<Response>, number] {
         const fetch = squawkFetch(client, { upstream: "openai", profile: "chat", deadlineMs: 30_000 });
         return [fetch, fetch.sdkRetries];
       }
       export async function use(client: SquawkClient): Promise<string> {
         const d = await client.decideRetry({ attempt: 1, httpStatus: 503 });
         const retry: boolean = d.action === Action.ACTION_RETRY;
         const onError = (info: ErrorInfo): Tier | undefined => (info.attempt > 1 || retry ? "fail" : undefined);
         const field: string = new SquawkInputError("attempt", "attempt: must be >= 1").field;
         return runStep(client, { q: field }, async (p) => p.q, { onError, correct: (p) => p, maxValidationRetries: 0 });
       }`,
    );
    run(process.execPath, [tsc, "-p", "."], consumer);
  });
});
