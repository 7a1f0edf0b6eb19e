"""`squawk check-policy` says which name a misspelt one looks like.

A new user wrote `defualt:` and check-policy called the file valid: a new
profile, based on default, that no call names, while `default` was left as
it was. Such a name is a warning (the file is valid), with its line; an
unknown field, already an error, names the field it looks like.
"""

from __future__ import annotations

from pathlib import Path

from conftest import squawk


def test_a_misspelt_profile_is_a_warning_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("profiles:\n  defualt:\n    max_attempts: 5\n")
    done = squawk("check-policy", str(path))
    assert done.returncode == 0, done.stderr
    valid, warning = done.stdout.splitlines()
    assert valid.startswith(f"{path}: valid (policy ")
    assert warning == (
        f"{path}: profiles.defualt (line 2): a new profile, based on default "
        "(did you mean 'default'?); the profile 'default' is left as it was"
    )


def test_a_misspelt_field_is_an_error_naming_the_field_meant(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("profiles:\n  default:\n    max_atempts: 5\n")
    done = squawk("check-policy", str(path))
    assert done.returncode == 2
    assert (
        f"{path}: profiles.default.max_atempts (line 3): unknown field "
        "(did you mean 'max_attempts'?); expected one of "
    ) in done.stderr
