"""The README stays a front door, and every link in the docs leads somewhere.

The README is the map: short enough to read at once, linking every page of
the manual in docs/, so a newcomer is one click from any of them. A link is
checked as GitHub renders it: a relative path must name a file or folder
of the checkout, and an anchor (`page.md#a-heading`) a heading of that page,
spelled as GitHub spells heading anchors.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
README_LIMIT = 15_000  # bytes: well under this, and a test says when it is not
MANUAL = tuple(sorted((ROOT / "docs").rglob("*.md")))
PAGES = (
    README,
    *MANUAL,
    ROOT / "bench" / "README.md",
    ROOT / "bench" / "REPORT.md",
    ROOT / "clients" / "python" / "README.md",
    ROOT / "clients" / "typescript" / "README.md",
)

# Pages that other work in progress writes, linked before they exist. A link
# to one passes while it is missing; once it exists, its entry here fails
# the test until it is removed, so the list never goes stale.
PENDING: dict[str, str] = {}

# The README names each client's step-failure error as the user writes it;
# each must be what the client declares.
FAILURE_TYPES = {
    "squawk_client.StepFailed": ("clients/python", "*.py", "class StepFailed("),
    "*squawk.RunError": ("clients/go", "*.go", "type RunError struct"),
    "StepFailedError": ("clients/typescript/src", "*.ts", "export class StepFailedError "),
}

_FENCE = re.compile(r"^\s*```")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[(?:[^\]\n]|\n(?!\n))*\]\(([^)\s]+)\)")


def prose(page: Path) -> list[str]:
    """The page's lines outside fenced blocks."""
    lines, fenced = [], False
    for line in page.read_text(encoding="utf-8").split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub makes: lower case, punctuation dropped,
    spaces as hyphens, and `-1`, `-2`, ... on repeats."""
    seen: Counter[str] = Counter()
    found = set()
    for line in prose(page):
        if (m := _HEADING.match(line)) is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", m[2].strip().lower()).replace(" ", "-")
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def links(page: Path) -> list[str]:
    """Every relative link target in the page's prose (code spans skipped)."""
    text = _CODE_SPAN.sub("", "\n".join(prose(page)))
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_readme_is_a_front_door_not_the_manual() -> None:
    size = len(README.read_bytes())
    assert size < README_LIMIT, (
        f"README.md is {size} bytes: move the detail to a page of docs/ and link it"
    )


def test_the_readme_links_every_page_of_the_manual() -> None:
    linked = {(README.parent / t.split("#", 1)[0]).resolve() for t in links(README)}
    unlinked = [name(p) for p in MANUAL if p.resolve() not in linked]
    assert unlinked == [], "add these pages to the README's map"


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            if dest.is_relative_to(ROOT) and name(dest) in PENDING:
                continue
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {name(dest)}")
    assert broken == []


def test_every_pending_page_is_still_missing() -> None:
    written = [page for page in PENDING if (ROOT / page).exists()]
    assert written == [], "these pages exist now: remove them from PENDING"


@pytest.mark.parametrize("failure", FAILURE_TYPES)
def test_the_readme_names_each_clients_step_failure_error(failure: str) -> None:
    assert f"`{failure}`" in README.read_text(encoding="utf-8")
    folder, pattern, declaration = FAILURE_TYPES[failure]
    sources = (ROOT / folder).rglob(pattern)
    assert any(declaration in source.read_text(encoding="utf-8") for source in sources)
