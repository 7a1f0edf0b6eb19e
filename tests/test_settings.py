"""The settings table (squawk.daemon.settings) is the one place each
setting is stated: serve's flags are made from it, no other module of the
daemon names a SQUAWK_ variable, and docs/settings.md is its current
rendering."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from squawk.daemon import cli, settings
from squawk.policy.env import ENV_PREFIXES, OVERRIDES

ROOT = Path(__file__).resolve().parent.parent
DAEMON = ROOT / "sidecar" / "daemon" / "squawk" / "daemon"
REFERENCE = ROOT / "docs" / "settings.md"


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def _subcommand(name: str) -> argparse.ArgumentParser:
    (sub,) = (a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


def test_serve_takes_exactly_the_tables_flags() -> None:
    table = {s.flag for s in settings.SETTINGS if s.flag and "serve" in s.commands}
    assert _flags(_subcommand("serve")) == table


@pytest.mark.parametrize("command", ["classify", "decide", "check-policy", "upstreams"])
def test_every_commands_settings_come_from_the_table(command: str) -> None:
    table = {s.flag for s in settings.SETTINGS if s.flag and command in s.commands}
    assert table <= _flags(_subcommand(command))


def test_a_flags_variable_is_named_in_its_help() -> None:
    for s in settings.SETTINGS:
        if s.flag and s.env:
            assert f"${s.env}" in s.flag_options["help"], s.name


def test_no_other_module_of_the_daemon_names_a_squawk_variable() -> None:
    named = []
    for path in sorted(DAEMON.rglob("*.py")):
        if path == DAEMON / "settings.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # Docstrings may name a variable; code may not.
        prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and id(node) not in prose
                and isinstance(node.value, str)
                and node.value.startswith("SQUAWK_")
            ):
                named.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert named == []


def test_the_reference_is_current() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == settings.reference()
    assert settings.main(["--check", str(REFERENCE)]) == 0


def test_a_stale_reference_fails_the_check(tmp_path: Path) -> None:
    stale = tmp_path / "settings.md"
    stale.write_text(settings.reference().replace("SQUAWK_LISTEN", "SQUAWK_LISTENS"))
    assert settings.main(["--check", str(stale)]) == 1
    assert settings.main([str(stale)]) == 0
    assert settings.main(["--check", str(stale)]) == 0
    assert settings.main(["--check", str(tmp_path / "missing.md")]) == 1


def test_every_variable_of_the_table_is_in_the_reference() -> None:
    text = settings.reference()
    assert all(f"`{s.env}`" in text for s in settings.SETTINGS if s.env)


def test_the_guides_step_retry_names_are_explained_where_they_are_listed() -> None:
    # A new user met TRUVAG3_STEP_RETRY_* with no word of what the prefix is:
    # each page that lists them says whose names they are and why they are read.
    guide = ENV_PREFIXES[1]
    why = "the executor framework's error-handling guide uses"
    reference = settings.reference()
    for override in OVERRIDES:
        note = f"{guide}{override.suffix} is read too, for compatibility: the name the"
        assert note in reference
        assert why in reference
    for page in ("configuration.md", "fallback.md"):
        text = " ".join((ROOT / "docs" / page).read_text(encoding="utf-8").split())
        assert f"`{guide}" in text and why in text and "compatibility" in text, page
