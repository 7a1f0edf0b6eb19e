// The entry point exports exactly the public names, no more, no fewer (as
// httpx pins its __all__): everything else is internal.
import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import ts from "typescript";
import * as entry from "../src/index";
import { PUBLIC_TYPES, PUBLIC_VALUES } from "./support/surface";

const sorted = (names: Iterable<string>): string[] => [...names].sort();

test("the entry point's run-time names are the public values", () => {
  assert.deepEqual(sorted(Object.keys(entry)), sorted(PUBLIC_VALUES));
});

test("the entry point's declared names are the public values and types", () => {
  // The compiled declarations are what a user's compiler reads.
  const index = join(__dirname, "..", "src", "index.d.ts");
  const program = ts.createProgram([index], { strict: true, noEmit: true });
  const checker = program.getTypeChecker();
  const file = program.getSourceFile(index);
  assert.ok(file, `${index} was not compiled`);
  const module = checker.getSymbolAtLocation(file);
  assert.ok(module, "index.d.ts is not a module");
  const names = checker.getExportsOfModule(module).map((symbol) => symbol.getName());
  assert.deepEqual(sorted(names), sorted([...PUBLIC_VALUES, ...PUBLIC_TYPES]));
});
