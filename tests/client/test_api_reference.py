"""The clients' API references, generated from each client's public names.

A new user found no API reference on the client pages (the Go page's
Decision fields had been guessed). Each page now ends in one, generated from
the client itself: the Go page's is checked by clients/go/reference_test.go,
the TypeScript page's by clients/typescript/test/reference.test.ts, and the
Python page's here.
"""

from __future__ import annotations

import re

import python_reference
import squawk_client


def _section() -> str:
    page = python_reference.PAGE.read_text(encoding="utf-8")
    start = page.index(python_reference.START) + len(python_reference.START)
    return page[start : page.index(python_reference.END)]


def test_the_python_reference_lists_every_public_name_and_no_other() -> None:
    # A name is the first identifier of a top-level item: `class Name`,
    # `def name(`, `async def name(`, `NAME = ...`.
    listed = re.findall(
        r"^- `(?:class |async def |def )?([A-Za-z_][A-Za-z0-9_]*)", _section(), re.MULTILINE
    )
    assert listed == list(squawk_client.__all__)


def test_the_python_reference_is_what_the_generator_writes() -> None:
    assert python_reference.main(["--check"]) == 0, (
        "run .venv/bin/python tests/support/python_reference.py"
    )
