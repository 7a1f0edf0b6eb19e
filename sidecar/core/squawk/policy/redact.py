"""Secret redaction: the one place that knows what a secret looks like.

Used for Classify's redacted_message, for every log line and span attribute
that carries upstream text, and for every prompt sent to a model. The Go and
TypeScript fallbacks (clients/go/redact.go, clients/typescript/src/redact.ts)
port these rules exactly; the "redaction" vectors in tests/vectors pin them.

The rules, applied in this order, each to the previous one's output:

1. PEM private keys: from `-----BEGIN ... PRIVATE KEY-----` to its END line,
   or, when the END line is missing (a cut message), to the next `-----` or
   the end of the text. The BEGIN and END lines are kept.
2. URL credentials: `scheme://user:password@` keeps the scheme; the user
   may be empty and the password may hold `@`.
3. Assignments `name=value`, `name: value`, `"name": "value"`, `name => v`:
   the name ends with a secret word (key, token, secret, password, pass,
   pwd, auth, signature, sig, credential, session, jwt, appid, ... see
   _NAME_WORDS) that starts the name or a part of it: after `_`, `-`, `.`
   or any other non-alphanumeric, at a camelCase hump, or after an escape.
   So `DB_PASSWORD`, `X-Amz-Signature`, `clientSecret` and `apiKey` are
   secret names; `monkey` and `max_tokens` are not. A quoted value is
   redacted whole, up to the same quote; an unquoted one up to whitespace,
   a quote, `& , ; } < >`, or an escaped whitespace or quote (`\\n`, `\\"`).
   A `Bearer ` (or Basic, Token, Digest) in front of the value is kept. An
   unquoted value that ends in a secret name and a separator (`api_key:`
   then `secret: x` on the next line) runs on over that name's value.
4. Authorization schemes: `Bearer|Basic|Token|Digest <credential>`, where the
   credential has 8+ characters and, after Basic, Token or Digest (which are
   also English words), does not read as a word (lower case,
   Capitalised or ALL CAPS, without digits), as random tokens do not: "Basic
   authentication failed." and "Bearer INVALID." stay readable. Runs after
   the assignments, so a scheme word never swallows a secret's name.
5. Token shapes that need no name: sk-/pk-/rk- keys, Stripe, GitHub, GitLab,
   Slack, AWS, Google, JWT, Hugging Face, npm, SendGrid, Shopify and
   DigitalOcean (see _TOKEN_SHAPES); after the assignments, so a token that
   runs into a name (`sk-x_password=y`) does not take the name away.

Names and tokens start only at a boundary: the start of the text, a
character that cannot be part of them, or an escape as repr() and JSON write
one (`\\n`, `\\t`, `\\x0b`, `\\u00e9`...), so "x\\\\npassword=..." is caught.
All character classes are ASCII and spelled out (no IGNORECASE, no `\\b`,
no `\\w`), so Python, Go (RE2) and JavaScript agree on every input. Only
`\\s` is Unicode: Python's whitespace, which the ports spell out.

Every pattern is linear-time by construction. A match may start only where
a lookbehind allows: a token, URL or authorization scheme after a character
its runs cannot consume, so no run is entered again from inside; an
assignment right after a secret name, so a run of separators or a value is
entered once. Every run is possessive and ends at a character it cannot
consume, so nothing is rescanned by backtracking, whatever the text holds.
tests/core/test_redact.py times every rule on hostile mebibyte inputs.

Redaction runs on every decision that carries text, so it is built for the
common case, a message with no secret in it: each rule first checks, with
plain substring tests on the lower-cased text, for the words every match
must contain (see _Needs), and skips its regex scan when they are missing.
The patterns also start with a character class, so `re` skips the other
positions in C, and replacements are functions, not templates.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["REDACTED", "redact"]

REDACTED = "[REDACTED]"

# What a rule's matches hold, for the prefilter: pairs of lower-case gates
# and words; a text may match when, for some pair, it holds one of the gates
# and one of the words. A gate is one short test that saves many (no "_",
# no need to look for "hf_" or "npm_"); the empty gate always holds.
_Needs = tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]


def _ci(word: str) -> str:
    """`word` matched ASCII-case-insensitively, without re.IGNORECASE.

    Under IGNORECASE `re` also folds the Kelvin sign to k and the long s to
    s, which RE2 and JavaScript do differently; spelled-out classes agree.
    """
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word)


# Escapes after which a match starts at a boundary although the escape ends
# in a letter or digit: text that went through repr() or JSON
# ("x\\npassword=...") hides its word boundaries behind them.
_ESCAPES = (r"\\[abfnrtv]", r"\\x[0-9A-Fa-f]{2}", r"\\u[0-9A-Fa-f]{4}")


def _starts_before(chars: str, width: int) -> str:
    """Holds `width` characters past a start: a start of the text, or one
    after none of `chars` (a character class body), or after an escape."""
    skip = f"[\\s\\S]{{{width}}}" if width else ""
    return "|".join((f"(?<![{chars}]{skip})", *(f"(?<={escape}{skip})" for escape in _ESCAPES)))


# --- rule 1: PEM private keys -----------------------------------------------------
_PEM_LABEL = "[ A-Z0-9]{0,40}?PRIVATE KEY(?: BLOCK)?-----"
_PEM = re.compile(
    rf"(?P<begin>-----BEGIN{_PEM_LABEL})"
    # Anything but the start of the next "-----", possessively.
    r"(?:[^-]|-(?!----))*+"
    rf"(?P<end>-----END{_PEM_LABEL})?"
)

# --- rule 2: credentials inside URLs ----------------------------------------------
_URL_CREDENTIALS = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*+://)"
    # user ":" password, the password being every "@"-ended piece up to a
    # "/" or whitespace.
    r"[^/\s:@]*+:(?:[^/\s@]*+@)++"
)

# --- rule 3: name = value ---------------------------------------------------------
# A name is secret when it ends with one of these words, the word starting at
# a boundary inside the name. Joined forms ("accesstoken") are listed because
# "token" after "s" is no boundary; separated ones ("access_token") need not
# be, except where the last part alone ("id") is no secret.
_NAME_WORDS = (
    *("key", "apikey", "hapikey", "appkey", "accesskey", "secretkey", "privatekey"),
    *("secret", "clientsecret"),
    *("token", "accesstoken", "apitoken", "authtoken", "idtoken", "refreshtoken"),
    "sessiontoken",
    *("password", "passwd", "pwd", "pass", "passphrase"),
    *("signature", "sig", "credential", "credentials"),
    *("auth", "authorization", "jwt", "session", "sessionid", "session_id", "session-id"),
    "appid",
)
# Every word above holds one of these, for the prefilter.
_NAME_NEEDS = (
    *("key", "secret", "token", "pass", "pwd", "sig", "auth", "session", "jwt"),
    "appid",
    "credential",
)
_LAST_LETTERS = "".join(sorted({c for w in _NAME_WORDS for c in (w[-1], w[-1].upper())}))
_SCHEME_WORDS = ("bearer", "basic", "token", "digest")
_SCHEMES = "|".join(_ci(s) for s in _SCHEME_WORDS)


def _word_end(words: tuple[str, ...], tail: str = "", tail_width: int = 0) -> str:
    """Holds right after one of `words` and then `tail` (`tail_width`
    characters), the word starting the text, or after a character that is
    not a letter or digit, or after an escape, or at a camelCase hump
    (`apiKey`, `XApiKey`).

    `re` lookbehinds are fixed-width, so the words are grouped by length.
    """
    by_length: dict[int, list[str]] = {}
    for word in words:
        by_length.setdefault(len(word), []).append(_ci(word))
    groups = []
    for n, spelled in sorted(by_length.items()):
        width = n + tail_width
        starts = (
            _starts_before("A-Za-z0-9", width),
            f"(?<=[a-z0-9][A-Z][\\s\\S]{{{width - 1}}})",
            f"(?<=[A-Z][A-Z][a-z][\\s\\S]{{{width - 2}}})",
        )
        groups.append(f"(?<=(?:{'|'.join(spelled)}){tail})(?:{'|'.join(starts)})")
    return "|".join(groups)


# What may follow a name: a closing quote (perhaps escaped), then ":" or "="
# (":=", "=>"...). Spelled by its first character, so that the pattern
# starts with a class: `re` then skips every other position in C.
_SEP_FIRST = r"[\\\"'\s:=]"
_SEP_REST = r"(?:(?<=\\)[\"']\s*+[:=]|(?<=[\"'\s])\s*+[:=]|(?<=[:=]))"
_SEPARATOR = (
    # Cheapest test first: a word's last letter, then the rest of a
    # separator, then the many lookbehinds of _word_end.
    rf"{_SEP_FIRST}(?<=[{_LAST_LETTERS}]{_SEP_FIRST})(?={_SEP_REST})"
    rf"(?:{_word_end(_NAME_WORDS, _SEP_FIRST, 1)}){_SEP_REST}[:=]*+>?\s*+"
)


def _closed(group: str, close: str = "") -> str:
    """A quoted string: up to the same quote, escaped the same way (`\\"`),
    with JSON escapes inside, on one line. `group` names the opening quote,
    `close` (if any) the closing one."""
    closing = f"(?P<{close}>(?P={group}))" if close else f"(?P={group})"
    return rf"(?P<{group}>\\?[\"'])(?:(?!(?P={group}))(?:[^\\\n]|\\.))++{closing}"


# Unquoted: a backslash starts a pair, and an escaped whitespace or quote
# ends the value as a raw one would.
_VALUE_CHAR = r"(?:[^\s\"'&,;}<>\\]|\\[^nrtfv\"'\s])"


# A quoted secret name, seen from right after its closing quote.
_QUOTED_NAME_END = "|".join(
    _word_end(_NAME_WORDS, tail, width) for tail, width in ((r"[\"']", 1), (r"\\[\"']", 2))
)


def _value(n: str) -> str:
    """A quoted value, redacted whole; or, where no quoted string starts, an
    unquoted one (perhaps after a quote that is never closed). A quoted
    secret name followed by a separator is the next name, not a value.
    `n` tells this value's groups apart."""
    return (
        rf"{_closed('open' + n, 'close' + n)}(?!(?:{_QUOTED_NAME_END})\s*+[:=])"
        rf"|(?!{_closed('probe' + n)})(?P<lone{n}>(?:\\?[\"'])?){_VALUE_CHAR}++"
    )


# An unquoted value that ends in a secret name and a separator, or in a
# scheme word ("api_key:" and, on the next line, "secret: x"), runs on over
# the next value. Stopping before the name instead would leave it to a
# match of its own, but a token shape can take the name away
# ("password=x sk-...DB_PASSWORD: y"), and a second pass would then see
# other assignments than the first.
_NEXT_VALUE = (
    rf"(?:{_word_end(_NAME_WORDS, '[:=]', 1)}|{_word_end(_SCHEME_WORDS)})"
    rf"\s++(?:(?:{_SCHEMES})\s++)?(?:{_value('2')})"
)
_ASSIGNMENT = re.compile(
    rf"(?P<sep>{_SEPARATOR})(?P<scheme>(?:{_SCHEMES})\s++)?"
    rf"(?:{_value('')})(?:{_NEXT_VALUE})*+"
)

# --- rule 4: authorization schemes ------------------------------------------------
_CREDENTIAL = "A-Za-z0-9._~+/=-"
_AUTH_SCHEME = re.compile(
    # The scheme's first letter first, so the pattern starts with a class.
    rf"(?P<scheme>[BbTtDd](?:{_starts_before('A-Za-z0-9_-', 1)})"
    rf"(?:(?<=[Bb])(?P<bearer>{_ci('earer')})|(?<=[Bb]){_ci('asic')}"
    rf"|(?<=[Tt]){_ci('oken')}|(?<=[Dd]){_ci('igest')}))"
    rf"(?P<space>\s++)(?=[{_CREDENTIAL}]{{8}})"
    # Not a word: lower case (perhaps Capitalised) or ALL CAPS, with symbols
    # but no digit, up to the end of the credential. What follows "Bearer"
    # is a credential whatever it reads like: the word is no English verb.
    rf"(?(bearer)|(?![A-Z]?[a-z._~+/=-]*+(?![{_CREDENTIAL}])|[A-Z._~+/=-]*+(?![{_CREDENTIAL}])))"
    rf"[{_CREDENTIAL}]++"
)

# --- rule 5: token shapes ---------------------------------------------------------
# (literal prefix, the rest). A token starts where the character before it
# is none of A-Za-z0-9_- (or after an escape), and not right after a
# backslash: in "\\rk-..." the r is an escape's, and a redaction that took
# it would leave the backslash to escape whatever follows. Every alternative
# starts with its literal, so the pattern starts with a class of first
# letters.
_TOKEN_SHAPES_TABLE = (
    *((p, "[A-Za-z0-9_-]{8,}+") for p in ("sk-", "pk-", "rk-")),  # OpenAI, Anthropic, Stripe
    *((p, "(?:live|test)_[A-Za-z0-9]{8,}+") for p in ("sk_", "pk_", "rk_")),  # Stripe
    ("whsec_", "[A-Za-z0-9]{16,}+"),  # Stripe webhook secret
    ("gh", "[pousr]_[A-Za-z0-9_]{16,}+"),  # GitHub
    ("github_pat_", "[A-Za-z0-9_]{16,}+"),
    ("glpat-", "[A-Za-z0-9_-]{16,}+"),  # GitLab
    ("xox", "[abposre]-[A-Za-z0-9-]{8,}+"),  # Slack
    ("xapp-", "[A-Za-z0-9-]{8,}+"),
    *((p, "[0-9A-Z]{16}(?![A-Za-z0-9_])") for p in ("AKIA", "ASIA")),  # AWS access key id
    ("AIza", "[A-Za-z0-9_-]{30,}+"),  # Google API key
    ("ya29.", "[A-Za-z0-9_-]{16,}+"),  # Google OAuth access token
    ("eyJ", r"[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"),  # JWT
    ("hf_", "[A-Za-z0-9]{30,}+"),  # Hugging Face
    ("npm_", "[A-Za-z0-9]{30,}+"),  # npm
    ("SG.", r"[A-Za-z0-9_-]{16,}+\.[A-Za-z0-9_-]{16,}+"),  # SendGrid
    ("shp", "(?:at|ss|ca|pa)_[A-Za-z0-9]{16,}+"),  # Shopify
    ("do", "[por]_v1_[A-Za-z0-9]{16,}+"),  # DigitalOcean
)
_TOKEN_NEEDS: _Needs = (
    # (sk|pk|rk)_, whsec_, gh?_, github_pat_, hf_, npm_, shp??_, do?_v1_
    (("_",), ("k_", "whsec_", "gh", "github_pat_", "hf_", "npm_", "shp", "_v1_")),
    (("-",), ("k-", "glpat-", "xox", "xapp-")),
    ((".",), ("ya29.", "eyj", "sg.")),
    (("",), ("akia", "asia", "aiza")),
)


def _token_shapes() -> str:
    # Grouped by first letter, so that `re` tries one group per position.
    # No two alternatives can match at the same place, so order is free.
    groups: dict[str, list[str]] = {}
    for prefix, rest in _TOKEN_SHAPES_TABLE:
        start = _starts_before(r"\\A-Za-z0-9_-", len(prefix))
        groups.setdefault(prefix[0], []).append(f"{re.escape(prefix[1:])}(?:{start}){rest}")
    return "|".join(f"{first}(?:{'|'.join(alts)})" for first, alts in groups.items())


_TOKEN_SHAPES = re.compile(_token_shapes())


def _kept(*parts: str) -> Callable[[re.Match[str]], str]:
    """A replacement: `parts` in order, each a group's name or a literal.

    A function, not a "\\g<name>" template: `re` looks templates up in a
    cache keyed by the pattern, and comparing these long patterns there
    costs more than the scan.
    """
    return lambda m: "".join((m[p] or "") if p.isidentifier() else p for p in parts)


def _assignment(m: re.Match[str]) -> str:
    """The separator and a kept scheme word, the first value's opening quote,
    and the closing quote of the last value (a chain may end quoted)."""
    end = m.end()
    close = next((m[g] for g in ("close2", "close") if m.end(g) == end), "")
    return f"{m['sep']}{m['scheme'] or ''}{m['open'] or ''}{m['lone'] or ''}{REDACTED}{close}"


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str]
    needs: _Needs


_RULES = (
    _Rule(_PEM, _kept("begin", REDACTED, "end"), ((("",), ("-----begin",)),)),
    _Rule(_URL_CREDENTIALS, _kept("scheme", REDACTED, "@"), ((("@",), ("://",)),)),
    _Rule(_ASSIGNMENT, _assignment, (((":", "="), _NAME_NEEDS),)),
    _Rule(_AUTH_SCHEME, _kept("scheme", "space", REDACTED), ((("",), _SCHEME_WORDS),)),
    _Rule(_TOKEN_SHAPES, REDACTED, _TOKEN_NEEDS),
)


def _may_match(folded: str, needs: _Needs) -> bool:
    for gates, words in needs:
        for gate in gates:
            if gate in folded:
                for word in words:
                    if word in folded:
                        return True
                break
    return False


def redact(text: str) -> str:
    """Return `text` with every recognised secret replaced by [REDACTED]."""
    if not text:
        return text
    # Every pattern matches ASCII letters only, and lower() maps every ASCII
    # letter to its ASCII lower case, so a word test on the folded text never
    # skips a rule that would match.
    folded = text.lower()
    for rule in _RULES:
        if not _may_match(folded, rule.needs):
            continue
        replaced = rule.pattern.sub(rule.replacement, text)
        if replaced is not text:
            text = replaced
            folded = text.lower()
    return text
