// Starts the real squawk daemon as a subprocess for the tests.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { credentials, Metadata } from "@grpc/grpc-js";
import { HealthCheckResponse_ServingStatus, HealthClient } from "../gen/grpc/health/v1/health";

/** The repository root: the nearest folder above this file holding protos/squawk/v1/policy.proto. */
export function repoRoot(): string {
  let dir = __dirname;
  for (;;) {
    if (existsSync(join(dir, "protos", "squawk", "v1", "policy.proto"))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no repository root above ${__dirname}`);
    dir = parent;
  }
}

export function squawkBinary(): string {
  const bin = process.env["SQUAWK_BIN"] ?? join(repoRoot(), ".venv", "bin", "squawk");
  if (!existsSync(bin)) {
    throw new Error(
      `the squawk daemon is missing: ${bin} does not exist. Run \`make setup\` at the repository root ` +
        "(it creates .venv with the squawk command) and run the tests again.",
    );
  }
  return bin;
}

/** A TCP port on 127.0.0.1 that nothing listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      if (address === null || typeof address === "string") {
        reject(new Error("no port"));
        return;
      }
      server.close(() => resolve(address.port));
    });
  });
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function checkHealth(target: string, timeoutMs: number): Promise<HealthCheckResponse_ServingStatus> {
  const client = new HealthClient(target, credentials.createInsecure());
  return new Promise<HealthCheckResponse_ServingStatus>((resolve, reject) => {
    client.check({ service: "" }, new Metadata(), { deadline: Date.now() + timeoutMs }, (error, response) => {
      client.close();
      if (error) reject(error);
      else resolve(response.status);
    });
  });
}

export interface StartOptions {
  /** More `squawk serve` arguments, such as the --tls-* flags. */
  readonly args?: readonly string[];
  /**
   * Serve health here too (--health-listen), plaintext whatever the
   * listener's TLS, and wait for SERVING here instead of on the listener.
   */
  readonly healthPort?: number;
  readonly readyTimeoutMs?: number;
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of live) child.kill("SIGKILL");
});

export class Daemon {
  readonly port: number;
  private readonly child: ChildProcess;
  private output = "";
  private exited: Promise<number | null>;

  private constructor(port: number, child: ChildProcess) {
    this.port = port;
    this.child = child;
    live.add(child);
    child.stdout?.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    this.exited = new Promise((resolve) => {
      child.on("exit", (code) => {
        live.delete(child);
        resolve(code);
      });
    });
  }

  get target(): string {
    return `127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Start `squawk serve` on `port` (default: a free one) and wait for health SERVING. */
  static async start(port?: number, options: StartOptions = {}): Promise<Daemon> {
    const { args = [], healthPort, readyTimeoutMs = 30_000 } = options;
    const bin = squawkBinary();
    const chosen = port ?? (await freePort());
    const health = healthPort === undefined ? [] : ["--health-listen", `127.0.0.1:${healthPort}`];
    const child = spawn(bin, ["serve", "--listen", `127.0.0.1:${chosen}`, ...health, ...args], {
      cwd: repoRoot(),
      stdio: ["ignore", "pipe", "pipe"],
    });
    const daemon = new Daemon(chosen, child);
    const probed = healthPort === undefined ? daemon.target : `127.0.0.1:${healthPort}`;
    let spawnError: Error | undefined;
    child.on("error", (error) => (spawnError = error));
    const until = Date.now() + readyTimeoutMs;
    for (;;) {
      if (spawnError !== undefined) throw new Error(`cannot start ${bin}: ${spawnError.message}`);
      if (!daemon.running) {
        throw new Error(`squawk serve exited before it was ready (code ${child.exitCode}):\n${daemon.output}`);
      }
      try {
        if ((await checkHealth(probed, 500)) === HealthCheckResponse_ServingStatus.SERVING) return daemon;
      } catch {
        // not listening yet
      }
      if (Date.now() > until) {
        await daemon.kill();
        throw new Error(`squawk serve was not SERVING within ${readyTimeoutMs} ms:\n${daemon.output}`);
      }
      await delay(100);
    }
  }

  /** SIGKILL, and wait for the process to be gone. */
  async kill(): Promise<void> {
    if (this.running) this.child.kill("SIGKILL");
    await this.exited;
  }

  /** SIGTERM (graceful), then SIGKILL if it lingers. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.child.kill("SIGTERM");
    let timer: NodeJS.Timeout | undefined;
    const lingering = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), 8000);
    });
    const done = await Promise.race([this.exited.then(() => true), lingering]);
    clearTimeout(timer);
    if (!done) await this.kill();
  }

  get log(): string {
    return this.output;
  }
}
