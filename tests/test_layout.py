"""The tests' own layout: the e2e and external markers (tests/conftest.py)
name real modules, a module that starts a daemon or a program is never in
the core's quick run, and every path under tests/ that the repository
names (docs, the Makefile, comments) exists."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from conftest import E2E_MODULES, EXTERNAL_MODULES, ROOT

MODULES = {path.stem: path.read_text() for path in (ROOT / "tests").rglob("test_*.py")}
# A call that starts the daemon, the `squawk` command or another program.
STARTS = re.compile(r"\b(start_daemon|serving|squawk|subprocess\.\w+|InProcessDaemon)\(")


def test_the_marker_tables_name_modules_that_exist() -> None:
    assert sorted((E2E_MODULES | EXTERNAL_MODULES) - MODULES.keys()) == []


def test_a_module_that_starts_a_process_or_a_daemon_is_e2e() -> None:
    starting = {name for name, text in MODULES.items() if STARTS.search(text)}
    assert sorted(starting - E2E_MODULES) == []


# What a checkout grows beside its files: not the repository's text.
GROWN = {"node_modules", "build", "dist", "__pycache__", "results"}


def repository_texts() -> Iterator[tuple[str, str]]:
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [
            d
            for d in subfolders
            if not d.startswith(".") and d not in GROWN and not d.endswith(".egg-info")
        ]
        for name in files:
            path = Path(folder, name)
            try:
                yield str(path.relative_to(ROOT)), path.read_text()
            except (UnicodeDecodeError, OSError):
                continue


def test_every_tests_path_the_repository_names_exists() -> None:
    named = {
        (path, found.rstrip(".,)"))
        for path, text in repository_texts()
        if not path.startswith("tests/vectors/")
        for found in re.findall(r"(?<![\w/])tests/[\w./-]+", text)
    }
    assert len(named) > 50
    assert sorted((path, name) for path, name in named if not (ROOT / name).exists()) == []
