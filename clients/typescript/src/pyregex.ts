// Pieces for matching text as Python's `re` does on str patterns, whose \s
// is Unicode-aware. Every pattern using S needs the "u" flag.

/** The characters of Python's \s (str.isspace()), for use inside a character class. */
export const SPACE_CHARS = "\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

/** Python's \s. */
export const S = `[${SPACE_CHARS}]`;

const SPACE = new RegExp(`^${S}$`, "u");

const EDGE_SPACES = new RegExp(`^${S}+|${S}+$`, "gu");
const SPACES = new RegExp(`${S}+`, "u");

/** Python's str.strip(): Python's whitespace, not JavaScript's (which adds U+FEFF and lacks \x1c-\x1f and U+0085). */
export function pyStrip(text: string): string {
  return text.replace(EDGE_SPACES, "");
}

/** Python's str.split() without arguments. */
export function pySplit(text: string): string[] {
  const stripped = pyStrip(text);
  return stripped === "" ? [] : stripped.split(SPACES);
}

/** Whether the UTF-16 code unit `code` is Python's \s; every such character is one unit. */
export function isPySpace(code: number): boolean {
  if (code < 0x80) return (code >= 0x09 && code <= 0x0d) || (code >= 0x1c && code <= 0x20);
  return SPACE.test(String.fromCharCode(code));
}
