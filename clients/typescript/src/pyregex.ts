// Pieces for writing JavaScript regular expressions that match as Python's
// `re` does on str patterns, whose \b, \w and \s are Unicode-aware.
// Every pattern using these needs the "u" flag.

/** Python's \w: letters, numbers and the underscore. */
const WORD = "[\\p{L}\\p{N}_]";

/** Python's \b. */
export const B = `(?:(?<=${WORD})(?!${WORD})|(?<!${WORD})(?=${WORD}))`;

/** The characters of Python's \s (str.isspace()), for use inside a character class. */
export const SPACE_CHARS = "\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

/** Python's \s. */
export const S = `[${SPACE_CHARS}]`;
