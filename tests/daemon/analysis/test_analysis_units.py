"""The pure pieces under the analyzers: dates, hints, spelling, prompt parsing, the cache."""

from __future__ import annotations

from typing import Any

import pytest

from squawk.daemon.analysis import dates
from squawk.daemon.analysis.cache import TTLCache
from squawk.daemon.analysis.hints import hints, mentions, readable
from squawk.daemon.analysis.prompt import answer_content, parse_answer, redact_json
from squawk.daemon.analysis.schema import UNCHECKED, problems
from squawk.daemon.analysis.similarity import name_closeness, nearest
from squawk.daemon.analysis.values import same_json

# (text, rendered as ISO, or None when it must not be read)
DATES = [
    ("2026-03-15", "2026-03-15"),
    ("2026/3/5", "2026-03-05"),
    ("20260315", "2026-03-15"),
    ("15/03/2026", "2026-03-15"),
    ("03/15/2026", "2026-03-15"),
    ("05.05.2026", "2026-05-05"),
    ("03/04/2026", None),  # March or April
    ("15/03/26", None),  # which century
    ("31/02/2026", None),  # no such day
    ("March 5, 2024", "2024-03-05"),
    ("5th March 2024", "2024-03-05"),
    ("15-Mar-2024", "2024-03-15"),
    ("Friday, 15 March 2024", "2024-03-15"),
    ("Monday, 15 March 2024", None),  # the weekday contradicts the date
    ("2026-03-15 14:30", "2026-03-15T14:30:00"),
    ("2026-03-15T14:30:00Z", "2026-03-15T14:30:00Z"),
    ("2026-03-15 14:30 +0200", "2026-03-15T14:30:00+02:00"),
    ("March 5, 2024 at 3pm", "2024-03-05T15:00:00"),
    ("3pm", "15:00:00"),
    ("12am", "00:00:00"),
    ("3:30 PM", "15:30:00"),
    ("14h30", "14:30:00"),
    ("15", None),  # a number, not a time
    ("13pm", None),
    ("tomorrow", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "iso"), DATES, ids=[d[0] or "empty" for d in DATES])
def test_dates_read_one_way_only(text: str, iso: str | None) -> None:
    parsed = dates.parse(text)
    assert (None if parsed is None else dates.render(parsed, dates.ISO)) == iso


def test_render_never_drops_or_invents_a_part() -> None:
    at_time = dates.parse("2026-03-15 14:30")
    assert at_time is not None
    assert dates.render(at_time, "%Y-%m-%d") is None  # would drop 14:30
    day = dates.parse("2026-03-15")
    assert day is not None
    assert dates.render(day, "%Y-%m-%dT%H:%M:%S") is None  # would invent a time
    assert dates.render(day, "%d/%m/%Y") == "15/03/2026"


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ("must be YYYY-MM-DD", "%Y-%m-%d"),
        ("use DD/MM/YYYY", "%d/%m/%Y"),
        ("time as HH:MM", "%H:%M"),
        ("expected yyyy-mm-ddTHH:mm:ss", "%Y-%m-%dT%H:%M:%S"),
        ("an ISO 8601 date", dates.ISO),
        ("RFC-3339 please", dates.ISO),
        ("YYYY-MM-DD or DD/MM/YYYY", None),  # two formats: not guessed
        ("a bad date", None),
    ],
)
def test_formats_named_in_text(text: str, fmt: str | None) -> None:
    assert dates.format_named_in(text) == fmt


@pytest.mark.parametrize(
    ("value", "fmt", "ok"),
    [
        ("2026-03-15", "date", True),
        ("2026-02-30", "date", False),
        ("15/03/2026", "date", False),
        ("2026-03-15T14:30", "date-time", True),
        ("2026-03-15T14:30:00+02:00", "date-time", True),
        ("2026-03-15", "date-time", False),
        ("14:30", "time", True),
        ("25:00", "time", False),
        ("anything", "email", True),  # unknown formats are not checked
    ],
)
def test_schema_formats(value: str, fmt: str, ok: bool) -> None:
    assert dates.conforms_format(value, fmt) is ok


@pytest.mark.parametrize(
    ("value", "options", "expected"),
    [
        ("eur", ["USD", "EUR"], "EUR"),
        ("premium economy", ["economy", "premium_economy"], "premium_economy"),
        ("relevence", ["relevance", "date"], "relevance"),
        ("dubble", ["SINGLE", "DOUBLE"], "DOUBLE"),
        ("PARIS", ["PAR", "LON"], "PAR"),
        ("eco", ["economy", "business"], "economy"),
        ("US", ["USD", "UK"], None),  # too short to be a slip
        ("rate", ["date", "rated"], None),  # a tie is a guess
        ("economy plus", ["economy", "business"], None),  # two words, not an abbreviation
        ("a-b", ["a_b", "a b"], None),  # two options fold the same
        ("celsius", ["metric", "imperial"], None),
        ("", ["x"], None),
        ("3", [1, 2, 3], 3),
    ],
)
def test_nearest(value: str, options: list[object], expected: object) -> None:
    found = nearest(value, options)  # type: ignore[arg-type]
    assert (None if found is None else found[0]) == expected


@pytest.mark.parametrize(
    ("wanted", "found", "score"),
    [
        ("city_code", "cityCode", 3),
        ("lat", "latitude", 2),
        ("currency", "curency", 2),
        ("currency", "currency_code", 2),
        ("currency", "local_currency", 1),
        ("to", "top", 0),
        ("currency", "country", 0),
    ],
)
def test_name_closeness(wanted: str, found: str, score: int) -> None:
    assert name_closeness(wanted, found) == score


def test_hints() -> None:
    assert [h.values for h in hints("PARIS is not valid, use PAR")] == [("PAR",)]
    assert [h.values for h in hints("Did you mean 'AAPL'?")] == [("AAPL",)]
    assert [h.values for h in hints("did you mean AAPL, AAP or APLE?")] == [("AAPL", "AAP", "APLE")]
    assert [h.values for h in hints("expected one of: a, b, c")] == [("a", "b", "c")]
    assert [h.values for h in hints("must be one of ['x', 'y']")] == [("x", "y")]
    assert hints("use a valid code") == []
    assert hints("use ISO codes") == []
    assert hints("must be YYYY-MM-DD") == []
    assert hints("must be positive") == []


def test_mentions() -> None:
    text = "origin 'PARIS' is invalid; check-in is fine; to: bad"
    found = mentions(
        text, {"origin": "PARIS", "check_in": "x", "to": "EUR"}, ["origin", "check_in", "to"]
    )
    assert found.keys() == {"origin", "check_in", "to"}
    # Short common words count only when quoted or written as `name:`.
    assert mentions("convert to euros", {"to": "EUR"}, ["to"]) == {}


def test_json_error_bodies_become_lines() -> None:
    body = '{"errors": [{"field": "adults", "message": "must be an integer"}, {"field": "city"}]}'
    assert readable(body).splitlines() == [
        "field: adults, message: must be an integer",
        "field: city",
    ]
    assert readable("{not json") == "{not json"


@pytest.mark.parametrize(
    ("content", "changes"),
    [
        ('{"changes": {"a": 1}, "reason": "x"}', {"a": 1}),
        ('```json\n{"changes": {}}\n```', {}),
        ('{"changes": {"a": NaN}}', None),
        ('{"changes": [1]}', None),
        ('{"reason": "no changes key"}', None),
        ("Sure! a=1", None),
        ("[]", None),
    ],
)
def test_parse_answer(content: str, changes: object) -> None:
    assert parse_answer(content) == changes


def test_answer_content() -> None:
    ok = {"choices": [{"message": {"content": "{}"}, "finish_reason": "stop"}]}
    assert answer_content(ok) == "{}"
    assert answer_content({"choices": []}) is None
    assert (
        answer_content(
            {"choices": [{"message": {"content": "x"}, "finish_reason": "content_filter"}]}
        )
        is None
    )
    assert answer_content({"choices": [{"message": {"content": None, "refusal": "no"}}]}) is None


def test_redact_json() -> None:
    value: dict[str, Any] = {
        "api_key": "abc def",
        "note": "token=sk-live-0123456789 ok",
        "nested": {"password": ["x", 1], "city": "Paris"},
        "long": "y" * 5000,
    }
    out = redact_json(value)
    assert isinstance(out, dict)
    assert out["api_key"] == "[REDACTED]"
    assert out["note"] == "token=[REDACTED] ok"
    assert out["nested"] == {"password": ["[REDACTED]", "[REDACTED]"], "city": "Paris"}
    assert isinstance(out["long"], str) and len(out["long"]) < 2100


def test_schema_problems_are_strict() -> None:
    schema: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 9}
    assert problems(2.0, schema) == []
    assert problems(True, schema) != []  # a boolean is not a number
    assert problems("2", schema) != []
    either: dict[str, Any] = {"anyOf": [{"type": "integer"}, {"enum": ["x"]}]}
    both: dict[str, Any] = {"allOf": [{"type": "string"}, {"maxLength": 0}]}
    assert problems("x", either) == []
    assert problems("x", both) != []
    # A pattern RE2 cannot read is never a pass: the value cannot be checked.
    (unreadable,) = problems("x", {"pattern": "(unclosed"})
    assert UNCHECKED in unreadable
    assert problems(5, {"exclusiveMinimum": True, "minimum": 5}) != []  # draft 4 style


def test_same_json() -> None:
    assert same_json(2, 2.0) and not same_json("2", 2) and not same_json(True, 1)
    assert same_json({"a": [1, None]}, {"a": [1.0, None]}) and not same_json([1], [1, 2])


def test_ttl_cache() -> None:
    now = [0.0]
    cache: TTLCache[str] = TTLCache(10, 2, lambda: now[0])
    cache.put("a", "1")
    cache.put("b", "2")
    cache.put("c", "3")  # evicts the oldest
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, "2", "3")
    now[0] = 10.0
    assert cache.get("b") is None
    off: TTLCache[str] = TTLCache(0, 10, lambda: now[0])
    off.put("a", "1")
    assert off.get("a") is None


def test_the_prompt_stays_bounded() -> None:
    from squawk.daemon.analysis import AnalysisRequest
    from squawk.daemon.analysis.prompt import Mode, messages

    request = AnalysisRequest(
        http_status=400,
        error_response="e" * 100_000,
        original_request={"q": "x"},
        dependency_results={f"step-{i}": {"blob": "z" * 1900} for i in range(200)},
    )
    _, user = messages(request, request.error_response, Mode.CONTEXTUAL)
    assert len(user["content"]) < 70_000
    assert "further step results left out" in user["content"]
