// Scanning helpers for redact.ts: the ASCII classes, Python's \s, and the
// lookbehinds the daemon's patterns use to say where a match may start.
import { isPySpace } from "./pyregex";

/** A match at i: its end and its replacement, or undefined. */
export type Matcher = (text: string, i: number) => [end: number, replacement: string] | undefined;

/** Tries `match` at each place `next` gives (the first at or after `from`, or -1); goes on after each match. */
export function replaceEach(text: string, next: (text: string, from: number) => number, match: Matcher): string {
  const parts: string[] = [];
  let done = 0;
  for (let i = next(text, 0); i >= 0 && i < text.length; ) {
    const found = match(text, i);
    if (!found) {
      i = next(text, i + 1);
      continue;
    }
    parts.push(text.slice(done, i), found[1]);
    done = found[0];
    i = next(text, done);
  }
  if (done === 0) return text;
  parts.push(text.slice(done));
  return parts.join("");
}

export function nextIndex(sub: string): (text: string, from: number) => number {
  return (text, from) => text.indexOf(sub, from);
}

export function nextAny(chars: string): (text: string, from: number) => number {
  return (text, from) => {
    for (let i = from; i < text.length; i++) if (chars.includes(text[i])) return i;
    return -1;
  };
}

export const code = (text: string, i: number): number => (i >= 0 && i < text.length ? text.charCodeAt(i) : -1);
export const isLower = (c: number): boolean => c >= 0x61 && c <= 0x7a;
export const isUpper = (c: number): boolean => c >= 0x41 && c <= 0x5a;
export const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
export const isAlnum = (c: number): boolean => isLower(c) || isUpper(c) || isDigit(c);
export const isHex = (c: number): boolean => isDigit(c) || ((c | 0x20) >= 0x61 && (c | 0x20) <= 0x66);
export const isTokenChar = (c: number): boolean => isAlnum(c) || c === 0x5f || c === 0x2d; // A-Za-z0-9_-
export const isQuote = (c: number): boolean => c === 0x22 || c === 0x27;
export const isIn = (chars: string) => (c: number): boolean => c >= 0 && chars.includes(String.fromCharCode(c));

export function skipSpaces(text: string, i: number): number {
  while (i < text.length && isPySpace(text.charCodeAt(i))) i++;
  return i;
}

/** Whether text[..i] ends with an escape as repr() and JSON write one: \a \b \f \n \r \t \v, \xHH or \uHHHH. */
export function afterEscape(text: string, i: number): boolean {
  if (i >= 2 && text[i - 2] === "\\" && "abfnrtv".includes(text[i - 1])) return true;
  if (i >= 4 && text.slice(i - 4, i - 2) === "\\x" && isHex(code(text, i - 2)) && isHex(code(text, i - 1))) return true;
  if (i >= 6 && text.slice(i - 6, i - 4) === "\\u") {
    for (let k = i - 4; k < i; k++) if (!isHex(code(text, k))) return false;
    return true;
  }
  return false;
}

/** Whether a match may start at i: at the start, after a character not part of it, or after an escape. */
export function startsAt(text: string, i: number, partOf: (c: number) => boolean): boolean {
  return i === 0 || !partOf(code(text, i - 1)) || afterEscape(text, i);
}

/** Whether `word` (lower case) is at i, ASCII letters matched in either case. */
export function wordAt(text: string, i: number, word: string): boolean {
  if (i < 0 || i + word.length > text.length) return false;
  for (let k = 0; k < word.length; k++) {
    const c = text.charCodeAt(i + k);
    if (c !== word.charCodeAt(k) && !(isUpper(c) && c + 0x20 === word.charCodeAt(k))) return false;
  }
  return true;
}

/**
 * Whether one of `words` ends at `end`, as Python's _word_end: starting the text,
 * after a character that is not a letter or digit, after an escape, or at a
 * camelCase hump (apiKey, XApiKey).
 */
export function wordEndsAt(text: string, end: number, words: readonly string[]): boolean {
  for (const w of words) {
    const s = end - w.length;
    if (!wordAt(text, s, w)) continue;
    const first = code(text, s);
    const before = code(text, s - 1);
    if (
      startsAt(text, s, isAlnum) ||
      (isUpper(first) && (isLower(before) || isDigit(before))) ||
      (isUpper(first) && isLower(code(text, s + 1)) && isUpper(before))
    ) {
      return true;
    }
  }
  return false;
}
