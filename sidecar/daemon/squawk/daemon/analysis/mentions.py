"""Which parameters an error text names, found in time linear in the text and the names.

A parameter is named when its name or its current value appears in the
text as a whole word:

- a name counts where it stands alone (`origin` in "origin is invalid",
  not in "originator"); a short or common name ("to", "id", see
  WEAK_NAMES) only where it is quoted (`'to'`) or assigned (`to: ...`);
- a name's words count in any case with spaces, `_` or `-` between them
  (`check_in` in "Check-in date");
- a string value of two characters or more counts where it stands alone.

The text is read once into an index of its words; each name is then a
dictionary lookup, so a request of thousands of parameters costs what its
text and names cost to read. (The first version compiled and ran two or
three regular expressions per parameter: 3,000 parameters named in a
16 KB error took seconds.) The rare name or value with characters other
than letters, digits, `_` and `-` is looked for with `str.find`, each
search charged to the analysis's budget, at most MAX_TRIES occurrences
each.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from . import budget
from .types import Json

__all__ = ["MAX_PHRASE_WORDS", "MAX_TRIES", "WEAK_NAMES", "mentions", "split_words"]

# Names this short or this common are only "named" when quoted or written as
# `name:` / `name=`: "to" and "from" appear in every English sentence.
WEAK_NAMES = frozenset(
    {"a", "an", "and", "as", "at", "by", "for", "from", "id", "if", "in", "is", "it", "no"}
    | {"of", "on", "or", "q", "the", "to", "type", "value"}
)
# Occurrences of one odd name or value examined before it counts as not named.
MAX_TRIES = 32
# A name of more words than this is found only as written, never as a phrase.
MAX_PHRASE_WORDS = 8
# Units per str.find over the text, per 64 characters of it.
_FIND_UNITS_PER_64 = 1

_RUN = re.compile(r"[\w-]+")  # a name's whole-word unit: (?<![\w-])name(?![\w-])
_WORD = re.compile(r"\w+")  # a value's: (?<!\w)value(?!\w)
_ALNUM = re.compile(r"[^\W_]+")  # one word of a name's words
_ASSIGN = re.compile(r"\s*[:=]")
_SEPARATOR = re.compile(r"[\s_-]+")
_OPEN_QUOTES = "'\"`“"
_CLOSE_QUOTES = "'\"`”"


def split_words(name: str) -> str:
    """A name as lower-case words: "checkIn" and "check_in" -> "check in"."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return " ".join(re.split(r"[^0-9a-zA-Z]+", spaced.lower())).strip()


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"  # exactly what `re` calls \w


class _Index:
    """The first position of each word of one text, read once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.runs: dict[str, int] = {}
        self.quoted: dict[str, int] = {}
        self.assigned: dict[str, int] = {}
        for m in _RUN.finditer(text):
            run, start, end = m.group(), m.start(), m.end()
            self.runs.setdefault(run, start)
            if (
                run not in self.quoted
                and start
                and text[start - 1] in _OPEN_QUOTES
                and end < len(text)
                and text[end] in _CLOSE_QUOTES
            ):
                self.quoted[run] = start - 1
            if run not in self.assigned and _ASSIGN.match(text, end):
                self.assigned[run] = start
        self.words: dict[str, int] = {}
        for m in _WORD.finditer(text):
            self.words.setdefault(m.group(), m.start())
        # Lower-case alphanumeric words, for a name's words in any case, and
        # the chain each belongs to: words `[\s_-]+` apart share a chain.
        self.alnum = [(m.group().lower(), m.start(), m.end()) for m in _ALNUM.finditer(text)]
        self.chain: list[int] = []
        for i, (_, start, _) in enumerate(self.alnum):
            linked = i and _SEPARATOR.fullmatch(text, self.alnum[i - 1][2], start)
            self.chain.append(self.chain[-1] if linked else i)
        self._phrases: dict[int, dict[str, int]] = {}

    def phrase(self, words: list[str]) -> int | None:
        """Where `words` first appear in sequence, `[\\s_-]+` apart, not inside a longer word."""
        if not 0 < len(words) <= MAX_PHRASE_WORDS:
            return None
        table = self._phrases.get(len(words))
        if table is None:
            table = self._phrases[len(words)] = self._table(len(words))
        return table.get(" ".join(words))

    def _table(self, length: int) -> dict[str, int]:
        """Every phrase of `length` words in the text -> where it first starts."""
        text, alnum, chain = self.text, self.alnum, self.chain
        table: dict[str, int] = {}
        for i in range(len(alnum) - length + 1):
            last = i + length - 1
            if chain[i] != chain[last]:
                continue
            start, end = alnum[i][1], alnum[last][2]
            if (start and text[start - 1] == "_") or (end < len(text) and text[end] == "_"):
                continue
            table.setdefault(" ".join(word for word, _, _ in alnum[i : last + 1]), start)
        return table


def _find(text: str, needle: str, hyphen_is_word: bool, weak: bool = False) -> int | None:
    """The first whole-word occurrence of an odd `needle`, by str.find, within budget."""
    units = _FIND_UNITS_PER_64 * (len(text) // 64 + 1)
    pos = -1
    for _ in range(MAX_TRIES):
        if not budget.afford(units):
            return None
        pos = text.find(needle, pos + 1)
        if pos < 0:
            return None
        end = pos + len(needle)
        before = text[pos - 1] if pos else ""
        after = text[end] if end < len(text) else ""
        if weak:
            if before and before in _OPEN_QUOTES and after and after in _CLOSE_QUOTES:
                return pos - 1
            if (not before or not _edge(before, True)) and _ASSIGN.match(text, end):
                return pos
            continue
        if not (before and _edge(before, hyphen_is_word)) and not (
            after and _edge(after, hyphen_is_word)
        ):
            return pos
    return None


def _edge(char: str, hyphen_is_word: bool) -> bool:
    return _is_word(char) or (hyphen_is_word and char == "-")


def mentions(text: str, request: Mapping[str, Json], names: Iterable[str]) -> dict[str, int]:
    """Parameter -> position of its first mention (by name or by current value)."""
    index = _Index(text)
    found: dict[str, int] = {}
    for name in names:
        spots: list[int | None] = []
        words = split_words(name)
        weak = not words or words in WEAK_NAMES or len(words) <= 2
        if _RUN.fullmatch(name):
            spots.append((index.quoted if weak else index.runs).get(name))
            if weak:
                spots.append(index.assigned.get(name))
        elif name:
            spots.append(_find(text, name, hyphen_is_word=True, weak=weak))
        if not weak:
            spots.append(index.phrase(words.split()))
        value = request.get(name)
        if isinstance(value, str) and len(value) >= 2:
            if _WORD.fullmatch(value):
                spots.append(index.words.get(value))
            else:
                spots.append(_find(text, value, hyphen_is_word=False))
        hits = [spot for spot in spots if spot is not None]
        if hits:
            found[name] = min(hits)
    return found
