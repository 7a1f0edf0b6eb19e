// Secret redaction for the fallback's redactedMessage: the port of
// sidecar/core/squawk/policy/redact.py, whose docstring states the rules; the
// "redaction" vectors in tests/vectors/decisions.json pin them.
//
// JavaScript regular expressions backtrack and have no possessive
// quantifiers, so the rules are written as scans, as in the Go port
// (clients/go/redact.go): each rule tries a match at each place one may
// start, on the text as it was before the rule, and goes on after each
// match, as Python's re.sub does; every run is taken whole and never given
// back. No rule goes back over text it has passed, so every rule is linear.
// Positions are UTF-16 code units: every character a rule looks at is one.
// The scanning helpers are in textscan.ts.
import { isPySpace } from "./pyregex";
import {
  code,
  isAlnum,
  isDigit,
  isIn,
  isLower,
  isQuote,
  isTokenChar,
  isUpper,
  nextAny,
  nextIndex,
  replaceEach,
  skipSpaces,
  startsAt,
  wordAt,
  wordEndsAt,
} from "./textscan";

export const REDACTED = "[REDACTED]";

/** `text` with every recognised secret replaced by [REDACTED]. */
export function redact(text: string): string {
  if (!text) return text;
  let out = replaceEach(text, nextIndex("-----BEGIN"), pemAt);
  out = replaceEach(out, nextURL, urlCredentialsAt);
  out = replaceEach(out, (t, from) => (from < t.length ? from : -1), assignmentAt);
  out = replaceEach(out, nextAny("BbTtDd"), authSchemeAt);
  return replaceEach(out, nextAny(TOKEN_FIRST_LETTERS), tokenAt);
}

// --- rule 1: PEM private keys -----------------------------------------------------

const PEM_LABEL = "[ A-Z0-9]{0,40}?PRIVATE KEY(?: BLOCK)?-----";
const PEM_BEGIN = new RegExp(`-----BEGIN${PEM_LABEL}`, "y");
const PEM_END = new RegExp(`-----END${PEM_LABEL}`, "y");

/** Matches `pattern` (sticky) at i; returns the end or -1. */
function stickyAt(pattern: RegExp, text: string, i: number): number {
  pattern.lastIndex = i;
  return pattern.test(text) ? pattern.lastIndex : -1;
}

/** Keeps the BEGIN line and the END line, if any, and redacts everything up to the next "-----". */
function pemAt(text: string, i: number): [number, string] | undefined {
  const body = stickyAt(PEM_BEGIN, text, i);
  if (body < 0) return undefined;
  const found = text.indexOf("-----", body);
  const end = found < 0 ? text.length : found;
  const labelEnd = Math.max(end, stickyAt(PEM_END, text, end));
  return [labelEnd, text.slice(i, body) + REDACTED + text.slice(end, labelEnd)];
}

// --- rule 2: credentials inside URLs ----------------------------------------------

const isSchemeChar = (c: number): boolean => isAlnum(c) || c === 0x2b || c === 0x2e || c === 0x2d; // + . -

/** The start of the run of scheme characters before the next "://". */
function nextURL(text: string, from: number): number {
  for (let k = text.indexOf("://", from); k >= 0; k = text.indexOf("://", k + 1)) {
    let start = k;
    while (start > 0 && isSchemeChar(text.charCodeAt(start - 1))) start--;
    if (start >= from) return start;
  }
  return -1;
}

/** scheme://user:password@, the password being every "@"-ended piece up to "/" or whitespace. */
function urlCredentialsAt(text: string, i: number): [number, string] | undefined {
  if (!isUpper(code(text, i)) && !isLower(code(text, i))) return undefined;
  let k = i + 1;
  while (isSchemeChar(code(text, k))) k++;
  if (!text.startsWith("://", k)) return undefined;
  const scheme = text.slice(i, k + 3);
  k += 3;
  while (k < text.length && !"/:@".includes(text[k]) && !isPySpace(text.charCodeAt(k))) k++;
  if (text[k] !== ":") return undefined;
  let end = -1;
  for (k++; ; k++) {
    while (k < text.length && !"/@".includes(text[k]) && !isPySpace(text.charCodeAt(k))) k++;
    if (text[k] !== "@") break;
    end = k + 1;
  }
  return end < 0 ? undefined : [end, scheme + REDACTED + "@"];
}

// --- rule 3: name = value ---------------------------------------------------------

/** sidecar/core/squawk/policy/redact.py's _NAME_WORDS and _SCHEME_WORDS. */
const NAME_WORDS = [
  ...["key", "apikey", "hapikey", "appkey", "accesskey", "secretkey", "privatekey"],
  ...["secret", "clientsecret"],
  ...["token", "accesstoken", "apitoken", "authtoken", "idtoken", "refreshtoken"],
  "sessiontoken",
  ...["password", "passwd", "pwd", "pass", "passphrase"],
  ...["signature", "sig", "credential", "credentials"],
  ...["auth", "authorization", "jwt", "session", "sessionid", "session_id", "session-id"],
  "appid",
] as const;
const SCHEME_WORDS = ["bearer", "basic", "token", "digest"] as const;
const isSeparator = (c: number): boolean => c === 0x3a || c === 0x3d; // : =

/** After a secret name at q: the separator, a scheme word that is kept, and the value. */
function assignmentAt(text: string, q: number): [number, string] | undefined {
  const before = code(text, q - 1);
  if (!isUpper(before) && !isLower(before)) return undefined;
  const i = separatorEnd(text, q);
  if (i < 0 || !wordEndsAt(text, q, NAME_WORDS)) return undefined;
  const value = valueAfterScheme(text, i);
  if (!value) return undefined;
  // A chain of values may end quoted: keep the last value's closing quote.
  const [end, close] = nextValues(text, value.end, value.open);
  return [end, text.slice(q, value.start) + value.open + value.lone + REDACTED + close];
}

/** The end of the separator at q (a closing quote, perhaps escaped; ":" and "=" runs; ">"; whitespace), or -1. */
function separatorEnd(text: string, q: number): number {
  let k = q;
  if (text[k] === "\\" && isQuote(code(text, k + 1))) k = skipSpaces(text, k + 2);
  else if (isQuote(code(text, k))) k = skipSpaces(text, k + 1);
  else k = skipSpaces(text, k);
  if (!isSeparator(code(text, k))) return -1;
  while (isSeparator(code(text, k))) k++;
  if (text[k] === ">") k++;
  return skipSpaces(text, k);
}

/** The end of a scheme word and the whitespace after it at i, or i. */
function schemeEnd(text: string, i: number): number {
  for (const w of SCHEME_WORDS) {
    if (!wordAt(text, i, w)) continue;
    const k = skipSpaces(text, i + w.length);
    if (k > i + w.length) return k;
  }
  return i;
}

interface Value {
  readonly start: number;
  readonly end: number;
  /** The quote around a quoted value, perhaps escaped. */
  readonly open: string;
  /** The quote never closed before an unquoted value. */
  readonly lone: string;
}

/** A value after a scheme word, if one is there and a value follows it; else right at i. */
function valueAfterScheme(text: string, i: number): Value | undefined {
  const j = schemeEnd(text, i);
  return (j > i ? valueAt(text, j) : undefined) ?? valueAt(text, i);
}

/**
 * A quoted value, redacted whole, unless it is a secret name followed by a
 * separator; or, where no quoted string starts, an unquoted value, perhaps after
 * a quote that is never closed.
 */
function valueAt(text: string, i: number): Value | undefined {
  const q = isQuote(code(text, i)) ? 1 : text[i] === "\\" && isQuote(code(text, i + 1)) ? 2 : 0;
  if (q > 0) {
    const open = text.slice(i, i + q);
    const closed = closedEnd(text, i, open);
    if (closed >= 0) {
      if (quotedNameEndsAt(text, closed) && isSeparator(code(text, skipSpaces(text, closed)))) return undefined;
      return { start: i, end: closed, open, lone: "" };
    }
  }
  const end = valueCharsEnd(text, i + q);
  return end === i + q ? undefined : { start: i, end, open: "", lone: text.slice(i, i + q) };
}

/** The end of the quoted string `open` starts at i: one or more characters on one line, a backslash taking the next. */
function closedEnd(text: string, i: number, open: string): number {
  let k = i + open.length;
  while (k < text.length && !text.startsWith(open, k) && text[k] !== "\n") {
    if (text[k] === "\\") {
      if (k + 1 >= text.length || text[k + 1] === "\n") break;
      k++;
    }
    k++;
  }
  return k > i + open.length && text.startsWith(open, k) ? k + open.length : -1;
}

/** Whether a secret name and a closing quote, perhaps escaped, end at e. */
function quotedNameEndsAt(text: string, e: number): boolean {
  return (
    (isQuote(code(text, e - 1)) && wordEndsAt(text, e - 1, NAME_WORDS)) ||
    (text[e - 2] === "\\" && isQuote(code(text, e - 1)) && wordEndsAt(text, e - 2, NAME_WORDS))
  );
}

const endsValue = isIn("\"'&,;}<>");
const endsAfterBackslash = isIn("nrtfv\"'");

/** The end of an unquoted value at k: up to whitespace, a quote, & , ; } < >, or an escaped whitespace or quote. */
function valueCharsEnd(text: string, k: number): number {
  while (k < text.length) {
    const c = text.charCodeAt(k);
    if (c === 0x5c) {
      const after = code(text, k + 1);
      if (after < 0 || endsAfterBackslash(after) || isPySpace(after)) break;
      k += 2;
      continue;
    }
    if (isPySpace(c) || endsValue(c)) break;
    k++;
  }
  return k;
}

/**
 * Runs on over the values that follow an unquoted value ending in a secret name
 * and a separator, or in a scheme word. Returns the end of the last value and its
 * closing quote (`close` is the one of the value ending at v).
 */
function nextValues(text: string, v: number, close: string): [number, string] {
  for (;;) {
    const named = isSeparator(code(text, v - 1)) && wordEndsAt(text, v - 1, NAME_WORDS);
    if (!named && !wordEndsAt(text, v, SCHEME_WORDS)) return [v, close];
    const k = skipSpaces(text, v);
    const value = k > v ? valueAfterScheme(text, k) : undefined;
    if (!value) return [v, close];
    [v, close] = [value.end, value.open];
  }
}

// --- rule 4: authorization schemes ------------------------------------------------

const isCredentialChar = (c: number): boolean => isAlnum(c) || (c >= 0 && "._~+/=-".includes(String.fromCharCode(c)));
const isSymbol = isIn("._~+/=-");

/** A scheme word, whitespace and a credential of 8 or more characters that, after Basic, Token or Digest, does not read as a word. */
function authSchemeAt(text: string, p: number): [number, string] | undefined {
  if (!startsAt(text, p, isTokenChar)) return undefined;
  const k = schemeEnd(text, p);
  if (k === p) return undefined;
  let e = k;
  while (isCredentialChar(code(text, e))) e++;
  // "Bearer" is no English word: what follows it is a credential whatever it reads like.
  const bearer = text.slice(p, p + 6).toLowerCase() === "bearer";
  if (e - k < 8 || (!bearer && readsAsWord(text, k, e))) return undefined;
  return [e, text.slice(p, k) + REDACTED];
}

/** Lower case (perhaps Capitalised) or ALL CAPS, with symbols but no digit. */
function readsAsWord(text: string, start: number, end: number): boolean {
  let lower = true;
  let upper = true;
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    lower &&= isLower(c) || isSymbol(c) || (i === start && isUpper(c));
    upper &&= isUpper(c) || isSymbol(c);
  }
  return lower || upper;
}

// --- rule 5: token shapes ---------------------------------------------------------

const ALNUM = (c: number): boolean => isAlnum(c);
const ALNUM_ = (c: number): boolean => isAlnum(c) || c === 0x5f;
const ALNUM_DASH = (c: number): boolean => isAlnum(c) || c === 0x2d;
const UPPER_DIGIT = (c: number): boolean => isUpper(c) || isDigit(c);

/** A run of at least `min` characters of a class (at most `max`), or a literal. */
type Part = { readonly chars: (c: number) => boolean; readonly min: number; readonly max?: number } | string;
const run = (chars: (c: number) => boolean, min: number, max?: number): Part => ({ chars, min, max });
const each = (prefixes: string, ...parts: Part[]): [string, Part[]][] => prefixes.split(" ").map((p) => [p, parts]);

/** sidecar/core/squawk/policy/redact.py's _TOKEN_SHAPES_TABLE, with the alternatives in its prefixes spelled out. */
const TOKEN_SHAPES: readonly [string, Part[]][] = [
  ...each("sk- pk- rk-", run(isTokenChar, 8)),
  ...each("sk_live_ sk_test_ pk_live_ pk_test_ rk_live_ rk_test_", run(ALNUM, 8)),
  ...each("whsec_", run(ALNUM, 16)),
  ...each("ghp_ gho_ ghu_ ghs_ ghr_ github_pat_", run(ALNUM_, 16)),
  ...each("glpat-", run(isTokenChar, 16)),
  ...each("xoxa- xoxb- xoxp- xoxo- xoxs- xoxr- xoxe- xapp-", run(ALNUM_DASH, 8)),
  // Exactly 16, not followed by A-Za-z0-9_.
  ...each("AKIA ASIA", run(UPPER_DIGIT, 16, 16)),
  ...each("AIza", run(isTokenChar, 30)),
  ...each("ya29.", run(isTokenChar, 16)),
  ...each("eyJ", run(isTokenChar, 8), ".", run(isTokenChar, 8), ".", run(isTokenChar, 0)),
  ...each("hf_ npm_", run(ALNUM, 30)),
  ...each("SG.", run(isTokenChar, 16), ".", run(isTokenChar, 16)),
  ...each("shpat_ shpss_ shpca_ shppa_", run(ALNUM, 16)),
  ...each("dop_v1_ doo_v1_ dor_v1_", run(ALNUM, 16)),
];
const TOKEN_FIRST_LETTERS = [...new Set(TOKEN_SHAPES.map(([prefix]) => prefix[0]))].join("");

/** The end of `parts` matched at k, each run taken whole, or -1. */
function partsEnd(text: string, k: number, parts: readonly Part[]): number {
  for (const part of parts) {
    if (typeof part === "string") {
      if (!text.startsWith(part, k)) return -1;
      k += part.length;
      continue;
    }
    const start = k;
    while (k < text.length && (part.max === undefined || k - start < part.max) && part.chars(text.charCodeAt(k))) k++;
    if (k - start < part.min) return -1;
    if (part.max !== undefined && ALNUM_(code(text, k))) return -1;
  }
  return k;
}

/** A token shape at p, where the character before is none of A-Za-z0-9_- and no backslash (or an escape ends there). */
function tokenAt(text: string, p: number): [number, string] | undefined {
  if (!startsAt(text, p, (c) => isTokenChar(c) || c === 0x5c)) return undefined;
  for (const [prefix, parts] of TOKEN_SHAPES) {
    if (!text.startsWith(prefix, p)) continue;
    const end = partsEnd(text, p + prefix.length, parts);
    if (end >= 0) return [end, REDACTED];
  }
  return undefined;
}
