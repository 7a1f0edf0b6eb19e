// Regenerates the committed ts-proto code with the protoc that ships in
// grpcio-tools (the repo's .venv, made by `make setup`):
//   src/gen   from protos/squawk/v1 (the package's messages and client) and
//             this package's copy of google/rpc (the BadRequest detail);
//   test/gen  from this package's copy of grpc.health.v1 (only the tests
//             wait for SERVING, so it stays out of the published package).
//
//   node scripts/gen.mjs           regenerate in place
//   node scripts/gen.mjs --check   regenerate into a temporary folder and fail
//                                  (exit 1, naming the files) if the committed
//                                  code differs
//
// The generated code is committed so that building needs Node alone.
// Override the interpreter with SQUAWK_PYTHON.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, "..");
const root = resolve(pkg, "..", "..");

const args = process.argv.slice(2);
if (args.length > 1 || (args.length === 1 && args[0] !== "--check")) {
  console.error("usage: node scripts/gen.mjs [--check]");
  process.exit(2);
}
const check = args[0] === "--check";

const python = process.env.SQUAWK_PYTHON ?? join(root, ".venv", "bin", "python");
if (!existsSync(python)) {
  console.error(`gen: ${python} is missing; run \`make setup\` at the repo root first (or set SQUAWK_PYTHON).`);
  process.exit(1);
}
const plugin = join(pkg, "node_modules", ".bin", "protoc-gen-ts_proto");
if (!existsSync(plugin)) {
  console.error(`gen: ${plugin} is missing; run \`npm ci\` first.`);
  process.exit(1);
}
const wellKnown = execFileSync(
  python,
  ["-c", "import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), '_proto'))"],
  { encoding: "utf8" },
).trim();

// Proto files are named relative to an include root, so the generated
// "source:" comments do not depend on where the repo is checked out.
const repoProtos = join(root, "protos");
const localProtos = join(pkg, "protos");
const squawkProtos = readdirSync(join(repoProtos, "squawk", "v1"))
  .filter((f) => f.endsWith(".proto"))
  .sort()
  .map((f) => `squawk/v1/${f}`);

const targets = [
  {
    dir: join("src", "gen"),
    protos: [...squawkProtos, "google/rpc/status.proto", "google/rpc/error_details.proto"],
  },
  { dir: join("test", "gen"), protos: ["grpc/health/v1/health.proto"] },
];

const options = [
  "outputServices=grpc-js",
  "esModuleInterop=true",
  "useExactTypes=false",
  "forceLong=number",
  // Enum values are their names: `decision.action === Action.ACTION_RETRY`
  // reads and logs as a name; the wire still carries the numbers.
  "stringEnums=true",
].join(",");

function generate(out, protos) {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  execFileSync(
    python,
    [
      "-m",
      "grpc_tools.protoc",
      `--plugin=protoc-gen-ts_proto=${plugin}`,
      `--ts_proto_out=${out}`,
      `--ts_proto_opt=${options}`,
      `-I${repoProtos}`,
      `-I${localProtos}`,
      `-I${wellKnown}`,
      ...protos,
    ],
    { stdio: "inherit" },
  );
}

/** Every file under `dir`, as paths relative to it, sorted. */
function listFiles(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath ?? entry.path, entry.name)))
    .sort();
}

/** The files that differ between the committed folder and a fresh one. */
function differences(committed, fresh) {
  const names = new Set([...listFiles(committed), ...listFiles(fresh)]);
  const stale = [];
  for (const name of [...names].sort()) {
    const a = join(committed, name);
    const b = join(fresh, name);
    if (!existsSync(a)) stale.push(`${name} (missing)`);
    else if (!existsSync(b)) stale.push(`${name} (not generated any more)`);
    else if (!readFileSync(a).equals(readFileSync(b))) stale.push(name);
  }
  return stale;
}

if (!check) {
  for (const { dir, protos } of targets) {
    generate(join(pkg, dir), protos);
    console.log(`gen: wrote ${dir} from ${protos.length} proto file(s)`);
  }
  process.exit(0);
}

const scratch = mkdtempSync(join(tmpdir(), "squawk-ts-gen-"));
try {
  let stale = [];
  for (const { dir, protos } of targets) {
    const fresh = join(scratch, dir);
    generate(fresh, protos);
    stale = stale.concat(differences(join(pkg, dir), fresh).map((name) => join(dir, name)));
  }
  if (stale.length > 0) {
    console.error(`gen --check: the committed generated code is stale; run \`npm run gen\`:\n  ${stale.join("\n  ")}`);
    process.exit(1);
  }
  console.log("gen --check: the committed generated code matches the protos");
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
