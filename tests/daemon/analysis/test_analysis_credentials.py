"""No analyzer sets or replaces a credential, and no caller secret reaches a prompt or an answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from squawk.daemon.analysis import AnalysisRequest
from squawk.daemon.analysis.credentials import credential_in, redacted, secret_name
from squawk.daemon.analysis.gates import CREDENTIAL_REFUSED, check_changes
from squawk.daemon.analysis.prompt import Mode, messages
from squawk.policy.text import shown_text

# Named like a credential by the one redaction rule, or not.
NAMES = [
    ("api_key", True),
    ("apiKey", True),
    ("x-api-key", True),
    ("password", True),
    ("token", True),
    ("client_secret", True),
    ("session_id", True),
    ("key", True),
    # The redaction rule redacts any name ending in a secret word, so the
    # model never sees these values either, and may not change them.
    ("sort_key", True),
    ("page_token", True),
    ("sort_by", False),
    ("page", False),
    ("keyword", False),
    ("monkey", False),
    ("city_code", False),
]


@pytest.mark.parametrize(("name", "secret"), NAMES, ids=[n for n, _ in NAMES])
def test_credential_names_come_from_the_redaction_rule(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


REQUEST = AnalysisRequest(
    http_status=400,
    original_request={
        "q": "hotels",
        "login": "Bearer abcdefgh12345678",  # a credential, under a name that says nothing
        "sort_by": "price",
        "filters": {},
    },
    parameter_schema={
        "properties": {
            "q": {"type": "string"},
            "password": {"type": "string"},
            "login": {"type": "string"},
            "sort_by": {"type": "string"},
            "filters": {"type": "object"},
        }
    },
)

# (parameter, proposed value, the refusal's start or None when it passes)
CHANGES: list[tuple[str, Any, str | None]] = [
    ("password", "hunter2", "password is named like a credential"),
    ("login", "Bearer zzzzzzzz87654321", "the current value of login holds a credential"),
    ("login", "none", "the current value of login holds a credential"),
    ("q", "ghp_0123456789abcdefghij", "the proposed value holds a value shaped like a secret"),
    (
        "q",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2ln",
        "the proposed value holds a value shaped",
    ),
    (
        "filters",
        {"nested": {"token": "t"}},
        "the proposed value holds a key named like a credential",
    ),
    ("filters", ["sk-abcdefghijklmnop"], "the proposed value holds a value shaped like a secret"),
    ("sort_by", "rating", None),
    ("q", "hotels in Paris", None),
    ("filters", {"stars": 4, "keyword": "pool"}, None),
]


@pytest.mark.parametrize(
    ("name", "value", "refusal"), CHANGES, ids=[f"{n}={str(v)[:20]}" for n, v, _ in CHANGES]
)
def test_the_credential_gate(name: str, value: Any, refusal: str | None) -> None:
    accepted, rejected = check_changes({name: value}, REQUEST, {})
    if refusal is None:
        assert accepted == {name: value} and rejected == []
    else:
        assert accepted == {}
        assert rejected[0].reason.startswith(f"{CREDENTIAL_REFUSED}: {refusal}")
        assert "no analyzer sets or replaces a credential" in rejected[0].reason


def test_credential_in_and_redacted_agree() -> None:
    value: Any = {"a": [1, {"b": "sk-abcdefghijklmnop"}], "password": "hunter2", "ok": "x"}
    assert credential_in(value) is not None
    assert redacted(value) == {
        "a": [1, {"b": "[REDACTED]"}],
        "password": "[REDACTED]",
        "ok": "x",
    }
    assert credential_in({"a": ["x", {"b": 2}]}) is None


def test_a_cut_never_leaves_half_a_secret() -> None:
    text = "ok " + "sk-abcdefghijklmnopqrstu" + " tail"
    for limit in range(len(text) + 2):
        shown = shown_text(text, limit)
        assert "sk-" not in shown and "abcdefgh" not in shown, (limit, shown)
        assert len(shown) <= limit + 1 or shown == "ok [REDACTED] tail"


CANARIES = [
    "sk-protectedcanary-00000000",
    "ghp_stepcanary0123456789abcd",
    "sk-keycanary-0000000000",
    "sk-schemakeycanary-00000000",
    "AKIAPROTECTED0123456",
]


@pytest.mark.parametrize("mode", list(Mode))
def test_every_caller_string_in_a_prompt_is_redacted_keys_included(mode: Mode) -> None:
    request = AnalysisRequest(
        http_status=400,
        error_response="bad city",
        original_request={"city": "PARIS", CANARIES[2]: 1},
        parameter_schema={"properties": {"city": {}, CANARIES[3]: {}}},
        protected_parameters=frozenset({"api_key", CANARIES[0], f"rooms.{CANARIES[4]}"}),
        dependency_results={CANARIES[1]: {"city": "PAR"}},
    )
    prompt = json.dumps(messages(request, request.error_response, mode))
    for canary in CANARIES:
        assert canary not in prompt
    assert "api_key" in prompt  # a plain name stays readable
