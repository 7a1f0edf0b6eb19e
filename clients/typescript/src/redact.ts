// Secret redaction, the same patterns as sidecar/policy/redact.py. Used for
// the classification's redacted_message when the fallback answers.
import { B, S, SPACE_CHARS } from "./pyregex";

export const REDACTED = "[REDACTED]";

const SECRET_NAMES =
  "api[_-]?key|apikey|x-api-key|access[_-]?key|secret[_-]?key|client[_-]?secret|secret" +
  "|access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|token" +
  "|password|passwd|pwd|private[_-]?key|session[_-]?id|signature|sig|key";

// name=value, name: value, "name": "value" for names that hold secrets.
const ASSIGNMENT = new RegExp(
  `(?<name>["']?${B}(?:${SECRET_NAMES})${B}["']?)` +
    `(?<sep>${S}*[:=]${S}*)` +
    `(?<quote>["']?)` +
    `(?!\\[REDACTED\\])` +
    `(?<value>[^${SPACE_CHARS}"'&,;}<>]+)`,
  "giu",
);
// Authorization schemes: "Bearer <token>", "Basic <b64>", "Token <t>".
const AUTH_SCHEME = new RegExp(`${B}(bearer|basic|token|digest)(${S}+)(?!\\[REDACTED\\])[A-Za-z0-9._~+/=-]{8,}`, "giu");
// Credentials inside URLs: scheme://user:password@host.
const URL_CREDENTIALS = new RegExp(`${B}([a-z][a-z0-9+.-]{1,15}://)[^/${SPACE_CHARS}:@]+:[^/${SPACE_CHARS}@]+@`, "giu");
// Well-known token shapes that need no name in front of them.
const TOKEN_SHAPES = new RegExp(
  [
    `${B}(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}`, // OpenAI/Anthropic/Stripe style
    `${B}(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}`, // GitHub
    `${B}xox[abposr]-[A-Za-z0-9-]{8,}`, // Slack
    `${B}AKIA[0-9A-Z]{16}${B}`, // AWS access key id
    `${B}AIza[0-9A-Za-z_-]{30,}`, // Google API key
    `${B}eyJ[A-Za-z0-9_-]{8,}\\.[A-Za-z0-9_-]{8,}\\.[A-Za-z0-9_-]*`, // JWT
  ].join("|"),
  "gu",
);

/** `text` with every recognised secret replaced by [REDACTED]. */
export function redact(text: string): string {
  if (!text) return text;
  let out = text.replace(URL_CREDENTIALS, `$1${REDACTED}@`);
  out = out.replace(AUTH_SCHEME, `$1$2${REDACTED}`);
  out = out.replace(ASSIGNMENT, `$<name>$<sep>$<quote>${REDACTED}`);
  return out.replace(TOKEN_SHAPES, REDACTED);
}
