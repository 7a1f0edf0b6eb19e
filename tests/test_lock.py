"""The lock (constraints.txt, made by `make lock`) is what the project's own
builds install: every package in the test environment is the locked version,
and the lock covers every requirement the three distributions declare, while
the distributions themselves keep ranges (a library must not pin its users)."""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib

from conftest import LOCK, ROOT

# Ours, installed editable from the tree: never in the lock.
PROJECT = {"squawk-core", "squawk-client", "squawk-daemon"}
PYPROJECTS = [ROOT / "pyproject.toml", ROOT / "sidecar/core/pyproject.toml"]
PYPROJECTS.append(ROOT / "clients/python/pyproject.toml")


def normal(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normal(re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0])


def locked() -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        name, equals, version = line.partition("==")
        assert equals and version.strip(), f"{LOCK.name}:{number}: not name==version: {line!r}"
        assert normal(name) not in pins, f"{LOCK.name}:{number}: {name} locked twice"
        pins[normal(name)] = version.strip()
    return pins


def installed() -> dict[str, str]:
    """What this test run's environment has installed (its site-packages)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=sys.path):
        name = normal(dist.metadata["Name"])
        if name not in PROJECT:
            found.setdefault(name, dist.version)
    return found


def test_every_installed_package_is_the_locked_version() -> None:
    pins = locked()
    outside = {name: version for name, version in installed().items() if name not in pins}
    assert not outside, (
        f"installed outside the lock: {outside}; add it to a pyproject's requirements "
        "and run `make lock`, or remove it from the environment"
    )
    drifted = {
        name: f"{version} installed, {pins[name]} locked"
        for name, version in installed().items()
        if pins[name] != version
    }
    assert not drifted, f"{drifted}; `make setup` installs the lock's versions"


def test_the_lock_covers_every_declared_requirement() -> None:
    pins = locked()
    declared = {"pip"}  # the resolver itself: `make setup` installs the locked pip first
    for path in PYPROJECTS:
        toml = tomllib.loads(path.read_text())
        declared.update(map(requirement_name, toml["build-system"]["requires"]))
        declared.update(map(requirement_name, toml["project"].get("dependencies", [])))
        for extra in toml["project"].get("optional-dependencies", {}).values():
            declared.update(map(requirement_name, extra))
    missing = sorted(declared - PROJECT - pins.keys())
    assert not missing, f"declared but not locked: {missing}; run `make lock`"


def test_what_users_install_keeps_ranges() -> None:
    # The published distributions' requirements (and the redis extra a user
    # asks for): ranges, but for our own core, released in lockstep.
    for path in PYPROJECTS:
        project = tomllib.loads(path.read_text())["project"]
        published = project.get("dependencies", []) + project.get("optional-dependencies", {}).get(
            "redis", []
        )
        pinned = [r for r in published if "==" in r and requirement_name(r) not in PROJECT]
        assert not pinned, f"{path.relative_to(ROOT)} pins its users: {pinned}"
