"""Build a README client example into a program, one function per language.

Each pastes the example into its harness (`example.*.tmpl` here), which
supplies only what the example leaves to the executor (its HTTP call,
`fixParams`, ...) and prints what the step returned as JSON; then builds it
with the language's own toolchain, as a user's project would, and returns
the command that runs it (the hotel API's URL in HOTEL_API_URL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

HARNESS = ROOT / "tests" / "support" / "readme_clients"


def build_python(example: str, work: Path) -> list[str]:
    program = work / "example.py"
    template = (HARNESS / "example.py.tmpl").read_text()
    program.write_text(template.replace("{example}", example))
    return [sys.executable, str(program)]


def build_go(example: str, work: Path) -> list[str]:
    """A throwaway module with a `replace` to clients/go, as a user's would be."""
    indented = "\n".join(f"\t{line}" if line else "" for line in example.split("\n"))
    template = (HARNESS / "example.go.tmpl").read_text()
    (work / "main.go").write_text(template.replace("{example}", indented))
    client = ROOT / "clients" / "go"
    lines = (client / "go.mod").read_text().split("\n")
    version = next(line for line in lines if line.startswith("go "))  # the client's Go version
    (work / "go.mod").write_text(
        f"module example.com/readme\n\n{version}\n\n"
        "require github.com/squawk-dev/squawk/clients/go v0.0.0\n\n"
        f"replace github.com/squawk-dev/squawk/clients/go => {client}\n"
    )
    env = {**os.environ, "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -mod=mod".strip()}
    go(["mod", "tidy"], work, env)
    go(["build", "-o", "example", "."], work, env)
    return [str(work / "example")]


def build_go_program(example: str, work: Path) -> list[str]:
    """A whole program, in a module that requires what clients/go/sdktest
    does (the SDK at the version its go.sum locks), with a `replace` to
    clients/go as a user's would have."""
    sdktest = ROOT / "clients" / "go" / "sdktest"
    module, rest = (sdktest / "go.mod").read_text().split("\n", 1)
    assert module.startswith("module "), module
    rest = rest.replace("=> ../", f"=> {ROOT / 'clients' / 'go'}")
    (work / "go.mod").write_text(f"module example.com/sdk\n{rest}")
    (work / "go.sum").write_text((sdktest / "go.sum").read_text())
    (work / "main.go").write_text(example)
    env = {**os.environ, "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -mod=mod".strip()}
    go(["build", "-o", "example", "."], work, env)
    return [str(work / "example")]


def go(args: list[str], module: Path, env: dict[str, str] | None = None) -> None:
    """Run `go args` in `module`; a cold module and build cache downloads and
    compiles gRPC, hence the long timeout."""
    argv = ["go", *args]
    done = subprocess.run(argv, cwd=module, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stderr}"


TS_CLIENT = ROOT / "clients" / "typescript"


def build_typescript(example: str, work: Path) -> list[str]:
    """An ES module (the example awaits at top level), compiled strict by the
    client's own tsc against its built package."""
    template = (HARNESS / "example.ts.tmpl").read_text()
    return typescript_module(template.replace("{example}", example), work)


def build_python_program(example: str, work: Path) -> list[str]:
    """A program as the docs show it whole, with no harness around it."""
    program = work / "example.py"
    program.write_text(example)
    return [sys.executable, str(program)]


def build_typescript_program(example: str, work: Path) -> list[str]:
    """A program as the docs show it whole, compiled as build_typescript's;
    a package it imports besides the client (an LLM SDK) is the one the
    client's own tests use, from its node_modules."""
    return typescript_module(example, work, TS_DEV_PACKAGES)


# The client's dev dependencies a docs program may import, as a user's
# project would have them installed.
TS_DEV_PACKAGES = ("openai",)


def typescript_module(source: str, work: Path, packages: tuple[str, ...] = ()) -> list[str]:
    """`source` as an ES module in `work`, with the built client (and
    `packages` of its node_modules) installed beside it, compiled strict."""
    built_typescript_client()
    (work / "example.ts").write_text(source)
    (work / "package.json").write_text(json.dumps({"type": "module", "private": True}))
    (work / "node_modules" / "@squawk").mkdir(parents=True)
    (work / "node_modules" / "@squawk" / "client").symlink_to(TS_CLIENT)
    for package in packages:
        installed = TS_CLIENT / "node_modules" / package
        if not installed.exists():
            pytest.fail(f"{installed.relative_to(ROOT)} is missing: run `make ts-build` first")
        (work / "node_modules" / package).symlink_to(installed)
    tsc(work, ["example.ts"])
    return ["node", str(work / "example.js")]


def built_typescript_client() -> None:
    """Fail unless clients/typescript is built (`make ts-build`)."""
    built = TS_CLIENT / "dist" / "src" / "index.js"
    if not built.exists():
        pytest.fail(f"{built.relative_to(ROOT)} is missing: run `make ts-build` first")


def tsc(work: Path, files: list[str], **options: object) -> None:
    """Compile `files` strict with the client's own tsc (and its Node types),
    from a tsconfig.json written in `work`; `options` add compiler options
    (e.g. checkJs for JavaScript with JSDoc types)."""
    config = {
        "compilerOptions": {
            "target": "ES2022",
            "module": "nodenext",
            "moduleResolution": "nodenext",
            "lib": ["ES2022"],
            "strict": True,
            "skipLibCheck": True,
            "typeRoots": [str(TS_CLIENT / "node_modules" / "@types")],
            "types": ["node"],
            **options,
        },
        "files": files,
    }
    (work / "tsconfig.json").write_text(json.dumps(config))
    command = [str(TS_CLIENT / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.json"]
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"tsc:\n{done.stdout}{done.stderr}"
