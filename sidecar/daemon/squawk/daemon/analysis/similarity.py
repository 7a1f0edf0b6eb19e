"""How close two spellings are: for enum values and for parameter names.

Optimal string alignment distance (Levenshtein plus adjacent transposition)
on folded text: case, spaces, underscores, hyphens and other punctuation are
ignored, so "premium economy", "Premium-Economy" and "premium_economy" are
one spelling.

Only short texts are compared: a value of more than MAX_SPELLING_CHARS
folded characters is no misspelling of anything (a code, a word or a short
phrase is), and comparing two 8,000-character strings cell by cell took
68 s. The distance is computed in a band of 2 x limit + 1 cells around the
diagonal, each comparison charged to the analysis's budget.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import budget
from .types import Json
from .values import scalar_text

__all__ = [
    "MAX_FOLD_CHARS",
    "MAX_SPELLING_CHARS",
    "distance",
    "fold",
    "name_closeness",
    "nearest",
]

MAX_SPELLING_CHARS = 64
# Texts longer than this are not even folded: folding a megabyte held the
# GIL (and so the event loop) for 60 ms, to compare it with short codes.
MAX_FOLD_CHARS = 1_024
# Units per cell of the distance table (about 0.3 us each), and per option
# folded and compared in `nearest`.
_CELL_UNITS = 30
_OPTION_UNITS = 20

_NOT_ALNUM = re.compile(r"[\W_]+")


def fold(text: str) -> str:
    return _NOT_ALNUM.sub("", text.casefold())


def distance(a: str, b: str, limit: int) -> int:
    """The OSA distance between a and b, or limit + 1 when it is over `limit`.

    Also limit + 1 ("not close") when either text is over MAX_SPELLING_CHARS
    or the analysis's budget cannot pay for the comparison.
    """
    over = limit + 1
    if abs(len(a) - len(b)) > limit or max(len(a), len(b)) > MAX_SPELLING_CHARS:
        return over
    width = len(b)
    if not budget.afford(_CELL_UNITS * (limit + 1)):
        return over  # not even the first row: nothing is built
    # Cells outside the band hold `over`: they are further than `limit` anyway.
    previous2 = [over] * (width + 1)
    previous = [j if j <= limit else over for j in range(width + 1)]
    for i, ca in enumerate(a, start=1):
        low, high = max(1, i - limit), min(width, i + limit)
        # Charged row by row, for the cells actually computed: most
        # comparisons stop after a few rows.
        if not budget.afford(_CELL_UNITS * (high - low + 1)):
            return over
        row = [over] * (width + 1)
        if i <= limit:
            row[0] = i
        for j in range(low, high + 1):
            cb = b[j - 1]
            if ca == cb:
                cell = previous[j - 1]  # never worse than any other way here
            else:
                cell = 1 + min(previous[j - 1], previous[j], row[j - 1])
                if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                    cell = min(cell, previous2[j - 2] + 1)
            row[j] = cell
        if min(row) > limit:
            return over
        previous2, previous = previous, row
    return min(previous[-1], over)


def _allowance(length: int) -> int:
    # One slip in a short code, two in a word, three in a phrase. Never more
    # than a third of the word: "US" is not a misspelling of "UK".
    return min(1 if length <= 5 else 2 if length <= 10 else 3, max(0, length // 3))


def nearest(value: str, options: Sequence[Json]) -> tuple[Json, str] | None:
    """The one option `value` is a variant of, and how (case or spacing, spelling, abbreviation).

    None when no option is close, or when two are equally close: a tie is
    a guess, and guesses are not corrections.
    """
    if len(value) > MAX_FOLD_CHARS or not budget.afford(_OPTION_UNITS * len(options)):
        return None
    folded = fold(value)
    if not folded:
        return None
    # Each option folded once; options that are containers, too long or
    # fold to nothing never match.
    folds: list[tuple[Json, str]] = []
    for option in options:
        text = scalar_text(option)
        if text is not None and len(text) <= MAX_FOLD_CHARS and (folded_option := fold(text)):
            folds.append((option, folded_option))
    same = [o for o, f in folds if f == folded]
    if len(same) == 1:
        return same[0], "case or spacing"
    if same or len(folded) > MAX_SPELLING_CHARS:
        return None
    limit = _allowance(len(folded))
    scored = sorted((distance(folded, f, limit), i) for i, (_, f) in enumerate(folds))
    if scored and scored[0][0] <= limit:
        if len(scored) > 1 and scored[1][0] == scored[0][0]:
            return None
        return folds[scored[0][1]][0], "spelling"
    # Last, abbreviations: one word that starts with a short code ("PARIS"
    # for PAR, "LONDON" for LON), or the start of one option ("eco" for
    # economy). "economy plus" is two words and never shortened to economy.
    one_word = value.strip().isalnum()
    stems = [
        o
        for o, f in folds
        if len(folded) >= 3
        and (
            (one_word and 3 <= len(f) <= 4 and folded.startswith(f))
            or (len(f) > len(folded) and f.startswith(folded))
        )
    ]
    return (stems[0], "abbreviation") if len(stems) == 1 else None


def _tokens(name: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return [t for t in re.split(r"[\W_]+", spaced.lower()) if t]


def name_closeness(wanted: str, found: str) -> int:
    """How well a key name matches a parameter name: 3 same, 2 close, 1 related, 0 not.

    "same" ignores case and separators (city_code ~ cityCode); "close" is a
    prefix or a one-letter slip (lat ~ latitude, curency ~ currency);
    "related" shares a word (currency ~ currency_code, local_currency).
    """
    a, b = fold(wanted), fold(found)
    if not a or not b:
        return 0
    if a == b:
        return 3
    short, long = sorted((a, b), key=len)
    if (len(short) >= 3 and long.startswith(short)) or (len(short) >= 4 and distance(a, b, 1) <= 1):
        return 2
    return 1 if set(_tokens(wanted)) & set(_tokens(found)) else 0
