// The daemon serving mutual TLS, reached the documented way: grpc-js
// credentials.createSsl(ca, key, cert) in the client's `credentials` option.
// The certificates are made here with openssl (Node has no X.509 issuing API).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { credentials, status, type ChannelCredentials } from "@grpc/grpc-js";
import { SquawkClient, SquawkError } from "../src/index";
import { Daemon, freePort } from "./support/daemon";

interface Pem {
  readonly cert: string;
  readonly key: string;
}

function openssl(...args: string[]): void {
  execFileSync("openssl", args, { stdio: "pipe", timeout: 60_000 });
}

/** A self-signed EC P-256 CA. */
function makeCa(dir: string, name: string): Pem {
  const ca = { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
  openssl(
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-days", "2", "-subj", `/CN=${name}`, "-keyout", ca.key, "-out", ca.cert,
  );
  return ca;
}

/** A certificate for 127.0.0.1 and localhost signed by `ca`; usage serverAuth or clientAuth. */
function issue(dir: string, ca: Pem, name: string, usage: "serverAuth" | "clientAuth"): Pem {
  const pair = { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
  const csr = join(dir, `${name}.csr`);
  const ext = join(dir, `${name}.ext`);
  writeFileSync(ext, `subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=${usage}\nbasicConstraints=CA:FALSE\n`);
  openssl(
    "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-subj", `/CN=${name}`, "-keyout", pair.key, "-out", csr,
  );
  openssl(
    "x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
    "-days", "2", "-extfile", ext, "-out", pair.cert,
  );
  return pair;
}

/** credentials.createSsl trusting `ca`, presenting `client` when given. */
function ssl(ca: Pem, client?: Pem): ChannelCredentials {
  const trusted = readFileSync(ca.cert);
  if (client === undefined) return credentials.createSsl(trusted);
  return credentials.createSsl(trusted, readFileSync(client.key), readFileSync(client.cert));
}

describe("mutual TLS", () => {
  let dir: string;
  let daemon: Daemon;
  let ca: Pem;
  let otherCa: Pem;
  let client: Pem;
  let stranger: Pem;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "squawk-ts-tls-"));
    ca = makeCa(dir, "ca");
    otherCa = makeCa(dir, "other-ca");
    const server = issue(dir, ca, "server", "serverAuth");
    client = issue(dir, ca, "client", "clientAuth");
    stranger = issue(dir, otherCa, "stranger", "clientAuth");
    daemon = await Daemon.start(undefined, {
      // The TLS port needs credentials; readiness is read on the plaintext health port.
      healthPort: await freePort(),
      args: ["--tls-cert", server.cert, "--tls-key", server.key, "--tls-client-ca", ca.cert],
    });
  });

  after(async () => {
    await daemon?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  test("a client certificate of the trusted CA is answered", async () => {
    const squawk = new SquawkClient(daemon.target, { credentials: ssl(ca, client), fallback: false, callTimeoutMs: 10_000 });
    try {
      const answer = await squawk.classify({ errorMessage: "HTTP 503" });
      assert.equal(answer.redactedMessage, "HTTP 503");
      assert.equal(answer.retryable, true);
    } finally {
      squawk.close();
    }
  });

  const refused: Array<[string, () => ChannelCredentials | undefined]> = [
    ["no client certificate", () => ssl(ca)],
    ["a client certificate of another CA", () => ssl(ca, stranger)],
    ["a client that does not trust the server's CA", () => ssl(otherCa, client)],
    ["plaintext", () => undefined],
  ];
  for (const [name, creds] of refused) {
    test(`${name} is refused: an error, not an answer`, async () => {
      const squawk = new SquawkClient(daemon.target, { credentials: creds(), fallback: false, callTimeoutMs: 10_000 });
      const unavailable = (e: unknown): boolean => e instanceof SquawkError && e.code === status.UNAVAILABLE;
      try {
        await assert.rejects(squawk.classify({ errorMessage: "HTTP 503" }), unavailable);
        await assert.rejects(squawk.decideRetry({ attempt: 1, httpStatus: 503 }), unavailable);
      } finally {
        squawk.close();
      }
    });
  }

  test("a refused client's decisions come from the fallback by default", async () => {
    const squawk = new SquawkClient(daemon.target, { credentials: ssl(ca), callTimeoutMs: 10_000 });
    try {
      const decision = await squawk.decideRetry({ attempt: 1, httpStatus: 503 });
      assert.equal(decision.fallback, true);
      assert.equal(squawk.fallbackCount, 1);
    } finally {
      squawk.close();
    }
  });
});
