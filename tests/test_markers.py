"""The e2e and external markers (tests/conftest.py) name real modules, and a
module that starts a daemon or a program is never in the core's quick run."""

from __future__ import annotations

import re

from conftest import E2E_MODULES, EXTERNAL_MODULES, ROOT

MODULES = {path.stem: path.read_text() for path in (ROOT / "tests").glob("test_*.py")}
# A call that starts the daemon, the `squawk` command or another program.
STARTS = re.compile(r"\b(start_daemon|serving|squawk|subprocess\.\w+|InProcessDaemon)\(")


def test_the_marker_tables_name_modules_that_exist() -> None:
    assert sorted((E2E_MODULES | EXTERNAL_MODULES) - MODULES.keys()) == []


def test_a_module_that_starts_a_process_or_a_daemon_is_e2e() -> None:
    starting = {name for name, text in MODULES.items() if STARTS.search(text)}
    assert sorted(starting - E2E_MODULES) == []
