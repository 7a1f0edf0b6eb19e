// Generates src/gen from protos/squawk/v1 with ts-proto, run through the
// protoc that ships in grpcio-tools (the repo's .venv, made by `make setup`).
// Override the interpreter with SQUAWK_PYTHON.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, "..");
const root = resolve(pkg, "..", "..");
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
const protoDir = join(root, "protos");
// The tests' health client comes from the small copy of grpc.health.v1 here.
const localProtoDir = join(pkg, "protos");
const protos = [
  ...readdirSync(join(protoDir, "squawk", "v1"))
    .filter((f) => f.endsWith(".proto"))
    .sort()
    .map((f) => join(protoDir, "squawk", "v1", f)),
  join(localProtoDir, "grpc", "health", "v1", "health.proto"),
];
const out = join(pkg, "src", "gen");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const options = [
  "outputServices=grpc-js",
  "esModuleInterop=true",
  "useExactTypes=false",
  "forceLong=number",
].join(",");
execFileSync(
  python,
  [
    "-m",
    "grpc_tools.protoc",
    `--plugin=protoc-gen-ts_proto=${plugin}`,
    `--ts_proto_out=${out}`,
    `--ts_proto_opt=${options}`,
    `-I${protoDir}`,
    `-I${localProtoDir}`,
    `-I${wellKnown}`,
    ...protos,
  ],
  { stdio: "inherit" },
);
console.log(`gen: wrote ${out} from ${protos.length} proto file(s)`);
