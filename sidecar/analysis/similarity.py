"""How close two spellings are: for enum values and for parameter names.

Optimal string alignment distance (Levenshtein plus adjacent transposition)
on folded text: case, spaces, underscores, hyphens and other punctuation are
ignored, so "premium economy", "Premium-Economy" and "premium_economy" are
one spelling.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .types import Json
from .values import scalar_text

__all__ = ["distance", "fold", "name_closeness", "nearest"]

_NOT_ALNUM = re.compile(r"[\W_]+")


def fold(text: str) -> str:
    return _NOT_ALNUM.sub("", text.casefold())


def distance(a: str, b: str, limit: int) -> int:
    """The OSA distance between a and b, or limit + 1 when it is over `limit`."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, start=1):
            cost = 0 if ca == cb else 1
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], previous2[j - 2] + 1)
        if min(row) > limit:
            return limit + 1
        previous2, previous = previous, row
    return min(previous[-1], limit + 1)


def _allowance(length: int) -> int:
    # One slip in a short code, two in a word, three in a phrase. Never more
    # than a third of the word: "US" is not a misspelling of "UK".
    return min(1 if length <= 5 else 2 if length <= 10 else 3, max(0, length // 3))


def nearest(value: str, options: Sequence[Json]) -> tuple[Json, str] | None:
    """The one option `value` is a variant of, and how (case or spacing, spelling, abbreviation).

    None when no option is close, or when two are equally close: a tie is
    a guess, and guesses are not corrections.
    """
    folded = fold(value)
    if not folded:
        return None
    texts = [(option, scalar_text(option)) for option in options]
    same = [o for o, t in texts if t is not None and fold(t) == folded]
    if len(same) == 1:
        return same[0], "case or spacing"
    if same:
        return None
    limit = _allowance(len(folded))
    scored = sorted(
        (distance(folded, fold(t), limit), i)
        for i, (_, t) in enumerate(texts)
        if t is not None and fold(t)
    )
    if scored and scored[0][0] <= limit:
        if len(scored) > 1 and scored[1][0] == scored[0][0]:
            return None
        return texts[scored[0][1]][0], "spelling"
    # Last, abbreviations: one word that starts with a short code ("PARIS"
    # for PAR, "LONDON" for LON), or the start of one option ("eco" for
    # economy). "economy plus" is two words and never shortened to economy.
    one_word = value.strip().isalnum()
    stems = [
        o
        for o, t in texts
        if t is not None
        and len(folded) >= 3
        and (
            (one_word and 3 <= len(fold(t)) <= 4 and folded.startswith(fold(t)))
            or (len(fold(t)) > len(folded) and fold(t).startswith(folded))
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
