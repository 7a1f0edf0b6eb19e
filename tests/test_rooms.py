"""The daemon's server keeps its rooms (docs/architecture.md): each imports
only the rooms below it, lifecycle/ over rpc/ over telemetry/ over
tracking/; and the fleet store's modules stay small."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

SERVER = ROOT / "sidecar" / "daemon" / "squawk" / "daemon" / "server"
# Top to bottom: a room may import the rooms after it, never one before.
ROOMS = ["lifecycle", "rpc", "telemetry", "tracking"]


def upward_imports(server: Path) -> list[str]:
    """Every `from ..room` import in `server` that names a room above (or
    beside, for none is) the importing module's own."""
    found = []
    for path in sorted(server.glob("*/*.py")):
        room = path.parent.name
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module:
                target = node.module.split(".")[0]
                if ROOMS.index(target) < ROOMS.index(room):
                    found.append(f"{room}/{path.name} -> {node.module}")
    return found


def test_no_room_imports_a_room_above_it() -> None:
    assert upward_imports(SERVER) == []


def test_the_fleet_stores_modules_and_scripts_stay_under_300_lines() -> None:
    sizes = {
        path.name: len(path.read_text().splitlines())
        for path in (SERVER / "tracking").glob("fleet*.*")
        if path.suffix in {".py", ".lua"}
    }
    assert len(sizes) > 5
    assert {name: n for name, n in sizes.items() if n > 300} == {}
