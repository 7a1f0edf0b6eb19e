"""Every search over caller data costs time linear in it, and finds what the slow one found.

A search the analysis budget pays for is checked in the budget's counted
units (the `analysis_budgets` fixture), which no machine's speed changes.
The rest is linear work the budget does not count (indexing words, looking
up members); for it the time limits are far above what the code takes and
far below what the quadratic versions took on the same input, so they hold
on a busy machine and fail on the old code.
"""

from __future__ import annotations

import asyncio
import re
import string
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from squawk.daemon.analysis import (
    AnalysisRequest,
    Analyzer,
    AnalyzerSettings,
    check_dispatch,
    contextual,
)
from squawk.daemon.analysis.budget import Budget, scope
from squawk.daemon.analysis.contextual import MAX_TARGETS
from squawk.daemon.analysis.heuristic import MAX_HINTS
from squawk.daemon.analysis.mentions import WEAK_NAMES, mentions, split_words
from squawk.daemon.analysis.schema import problems
from squawk.daemon.analysis.similarity import distance, nearest
from squawk.policy import builtin_policy

OFFLINE = Analyzer(AnalyzerSettings(), builtin_policy())


@contextmanager
def within(seconds: float) -> Iterator[None]:
    started = time.perf_counter()
    yield
    elapsed = time.perf_counter() - started
    assert elapsed < seconds, f"took {elapsed:.2f} s"


def test_a_long_value_is_no_misspelling() -> None:
    # 8,000 characters against one 8,000-character member took 68 s.
    value = "x" * 8_000
    with within(0.05):
        assert nearest(value, [value[:-1] + "y"]) is None
    # A short slip is still found.
    assert nearest("relevence", ["relevance", "date"]) == ("relevance", "spelling")


def test_many_near_members_cost_what_they_hold(analysis_budgets: list[Budget]) -> None:
    # 2,000 members of 60 characters, each one slip from the value: every
    # comparison runs to the end of its band, until the budget is spent
    # (2,000 full 60 x 60 tables before: several seconds).
    value = "ab" * 30
    members: list[Any] = [value[:i] + "c" + value[i + 1 :] for i in range(60)] * 34
    request = AnalysisRequest(
        http_status=400,
        error_response="bad code",
        original_request={"code": value},
        parameter_schema={"properties": {"code": {"enum": members}}},
    )
    result = asyncio.run(OFFLINE.analyze(request))
    assert result.suggested_changes == {}  # a tie is a guess
    # Every row compared was paid for, and the comparing stopped with less
    # left than one full row of the band costs (7 cells of 30 units).
    (budget,) = analysis_budgets
    assert 0 <= budget.left < 7 * 30


def _osa(a: str, b: str) -> int:
    """Optimal string alignment distance, the textbook full table."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(
                d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


@settings(max_examples=400, deadline=None)
@given(st.text("abc", max_size=12), st.text("abc", max_size=12), st.integers(0, 4))
def test_the_banded_distance_is_the_full_one(a: str, b: str, limit: int) -> None:
    assert distance(a, b, limit) == min(_osa(a, b), limit + 1)


# The rule `mentions` implements, written as the regular expressions it
# replaced: one search per name, in the text as written.
def _first(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return None if m is None else m.start()


def _mentions_by_regex(text: str, request: Mapping[str, Any], names: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for name in names:
        words = split_words(name)
        weak = not words or words in WEAK_NAMES or len(words) <= 2
        quoted = re.escape(name)
        spots = []
        if name and name in text:
            spots.append(
                _first(rf"""['"`“]{quoted}['"`”]|(?<![\w-]){quoted}\s*[:=]""", text)
                if weak
                else _first(rf"(?<![\w-]){quoted}(?![\w-])", text)
            )
        if not weak:
            phrase = r"[\s_-]+".join(re.escape(w) for w in words.split())
            spots.append(_first(rf"(?i)(?<![\w]){phrase}(?![\w])", text))
        value = request.get(name)
        if isinstance(value, str) and len(value) >= 2 and value in text:
            spots.append(_first(rf"(?<![\w]){re.escape(value)}(?![\w])", text))
        hits = [s for s in spots if s is not None]
        if hits:
            found[name] = min(hits)
    return found


_PIECES = [
    "origin", "to", "check_in", "check-in", "Check In", "checkIn", "CITY code", "PARIS",
    "PAR", "id", "x.y", "a b", "2026-04-01", "_", "-", " ", ".", ",", '"', "'", "`", "“",
    "”", ":", "=", "code", "city", "é", "K", "\n", "value", "e-mail", "e_mail",
]  # fmt: skip
_NAMES = ["origin", "to", "check_in", "checkIn", "city_code", "id", "x.y", "a b", "type"]
_NAMES += ["e-mail", "e_mail", "city", "code", "café_x"]
_VALUES = ["PARIS", "PAR", "2026-04-01", "x", "city code", "a-b", "e-mail", "to", "ab"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), max_size=14),
    st.lists(st.sampled_from(_NAMES), max_size=6, unique=True),
    st.lists(st.sampled_from(_VALUES), max_size=6),
)
def test_the_word_index_finds_what_the_regexes_found(
    pieces: list[str], names: list[str], values: list[str]
) -> None:
    text = " ".join(pieces)
    request = dict(zip(names, values, strict=False))
    assert mentions(text, request, names) == _mentions_by_regex(text, request, names)


def test_thousands_of_names_in_a_long_error_cost_one_reading() -> None:
    names = [f"param_number_{i}" for i in range(3_000)]
    text = ("invalid: " + " ".join(names))[:16_384]
    with within(0.5):  # the regex-per-name version took seconds
        found = mentions(text, {}, names)
    assert found["param_number_0"] == text.index("param_number_0")
    assert "param_number_2999" not in found  # past the 16 KB the text keeps


def _timed_analysis(request: AnalysisRequest, seconds: float) -> None:
    with within(seconds):
        asyncio.run(OFFLINE.analyze(request))


def test_a_request_of_thousands_of_parameters_is_analysed_in_linear_time() -> None:
    names = [f"param_number_{i}" for i in range(4_000)]
    request = AnalysisRequest(
        http_status=400,
        error_response="invalid: " + " ".join(names),
        original_request={n: f"valu{i}" for i, n in enumerate(names)},
        parameter_schema={
            "properties": {
                n: {"type": "string", "enum": [f"value{i}", "other", "x"]}
                for i, n in enumerate(names)
            }
        },
    )
    _timed_analysis(request, 5.0)  # the quadratic lookups took over 10 s


def test_enum_membership_costs_one_lookup_per_value() -> None:
    members: list[Any] = [f"m{i}" for i in range(10_000)]
    schema: dict[str, Any] = {"properties": {"tags": {"type": "array", "items": {"enum": members}}}}
    tags: list[Any] = [f"m{i}" for i in range(0, 20_000, 2)]
    with within(1.0):  # 10,000 x 10,000 comparisons before
        violations = check_dispatch({"tags": tags}, schema)
    assert [v.parameter for v in violations][:2] == ["tags[5000]", "tags[5001]"]
    with within(1.0):
        assert problems(tags[:5_000], schema["properties"]["tags"]) == []


def _words(n: int) -> Iterator[str]:
    letters = string.ascii_lowercase
    for i in range(n):
        yield letters[i % 26] + letters[(i // 26) % 26] + str(i)


def test_the_cost_is_the_same_for_every_run() -> None:
    # The budget counts steps, not time: one request always gets one answer.
    request = AnalysisRequest(
        http_status=400,
        error_response="bad code",
        original_request={"code": "q" * 60},
        parameter_schema={"properties": {"code": {"enum": ["q" * 59 + w for w in _words(3000)]}}},
    )
    answers: list[Callable[[], object]] = [lambda: asyncio.run(OFFLINE.analyze(request))] * 3
    first, *rest = (answer() for answer in answers)
    assert all(other == first for other in rest)


def test_an_error_full_of_suggestions_costs_linear_time() -> None:
    # 2,000 suggestions, each tried on 2,000 named parameters, took 12 s.
    names = [f"p{i}" for i in range(2_000)]
    mentioned = " ".join(f"'{n}'" for n in names)[:8_000]
    request = AnalysisRequest(
        http_status=400,
        error_response=(mentioned + ". " + " ".join(f"use V{i};" for i in range(2_000)))[:16_384],
        original_request={n: "x" for n in names},
        parameter_schema={"properties": {n: {"type": "string"} for n in names}},
    )
    with within(2.0):
        result = asyncio.run(OFFLINE.analyze(request))
    assert f"more than {MAX_HINTS} suggestions" in result.reason


def test_many_failing_parameters_do_not_each_read_every_result() -> None:
    names = [f"code_{i}" for i in range(1_000)]
    request = AnalysisRequest(
        http_status=400,
        error_response="invalid codes",
        original_request={n: "12345" for n in names},
        parameter_schema={
            "properties": {n: {"type": "string", "pattern": "^[A-Z]+$"} for n in names}
        },
        dependency_results={"geo": {f"code_{i}": f"UPPER{i % 7}" for i in range(9_000)}},
    )
    with within(2.0), scope(Budget()):  # 1,000 parameters x 9,000 values before
        proposal = contextual.propose(request, request.error_response)
    assert f"only the first {MAX_TARGETS} of 1000 failing parameters are tried" in proposal.why_not


def test_a_megabyte_value_is_not_read_for_slips() -> None:
    # Folding or re-spacing a megabyte to compare it with short codes held
    # the GIL, and so the event loop, for 60 ms; no slip is that long.
    huge = "Paris " * 200_000
    with within(0.03):
        assert nearest(huge, ["PARIS", "LON"]) is None
    request = AnalysisRequest(
        http_status=400,
        error_response="bad city",
        original_request={"city": huge},
        parameter_schema={"properties": {"city": {"enum": ["PARIS"], "format": "date"}}},
    )
    with within(0.5):
        assert asyncio.run(OFFLINE.analyze(request)).suggested_changes == {}


def test_a_status_is_looked_for_where_the_analyzers_read() -> None:
    # No status given: the error text is searched for one, its first 16 KiB.
    late = AnalysisRequest(http_status=0, error_response="x " * 500_000 + "status 400")
    with within(0.03):  # the whole megabyte: 80 ms with the GIL held
        skipped = OFFLINE.skip(late)
    assert skipped is not None and skipped.is_transient_error  # no status known
    early = AnalysisRequest(http_status=0, error_response="status 400: bad" + " x" * 500_000)
    assert OFFLINE.skip(early) is None  # a 400: analysed


def test_whitespace_runs_in_an_error_text_cost_linear_time() -> None:
    # Several `\s*` meeting on a run of spaces made the hint patterns try
    # every split of it: 16 KiB of spaces after "use" took over ten seconds.
    from squawk.daemon.analysis.hints import MAX_ERROR_CHARS, hints

    for text in (
        "use" + " " * MAX_ERROR_CHARS,
        "did you mean" + "\t" * MAX_ERROR_CHARS + ":",
        "must be" + " \n" * (MAX_ERROR_CHARS // 2),
    ):
        started = time.process_time()
        assert hints(text) == []
        assert time.process_time() - started < 1.0  # a hang guard, not a benchmark
    # Folding keeps what the hints read: a list across a run of spaces.
    (found,) = hints("city_code must be one of:      PAR,     LON")
    assert found.values == ("PAR", "LON")
