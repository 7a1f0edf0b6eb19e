"""Every setting the `squawk` command reads, in one table.

Each row says where a setting may come from (a flag, an environment
variable, a key of the policy file), its default, what it accepts and when
it is read. The command's flags are made from it (cli.py), the environment
overlays read their variables' names from it (the serve flags' variables
here and in cli.py, `config/analyzer.py`, `config/state.py`; the
SQUAWK_STEP_RETRY_* rows are made from the core's own list,
`squawk.policy.env.OVERRIDES`), and so is the configuration reference,
docs/settings.md:

    python -m squawk.daemon.settings docs/settings.md          # rewrite it
    python -m squawk.daemon.settings --check docs/settings.md  # fail if stale

A flag wins over its variable, and a variable over the policy file. The
daemon is built from one value, `ServeSettings`: what the flags and the
environment say, resolved, with the loaded policy file (`Config`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from squawk.policy import builtin_profile
from squawk.policy.backoff import format_duration
from squawk.policy.env import ENV_PREFIXES, OVERRIDES

if TYPE_CHECKING:
    from .config import Config
    from .server.lifecycle.tls import TlsFiles

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_LISTEN",
    "DEFAULT_SOCKET_MODE",
    "LOG_LEVELS",
    "POLL_S",
    "SETTINGS",
    "ServeSettings",
    "Setting",
    "address",
    "log_level",
    "octal_mode",
    "reference",
    "seconds",
]

DEFAULT_LISTEN = "127.0.0.1:50051"
# The whole shutdown, from the signal to the exit; well inside Kubernetes'
# default terminationGracePeriodSeconds (30).
DEFAULT_GRACE_S = 5.0
# Owner and group may connect to a unix:// socket: the executor runs as the
# daemon's user or in its group; nobody else on the host can.
DEFAULT_SOCKET_MODE = 0o660
# How often the policy file is looked at for a change.
POLL_S = 1.0
# What --log-level and SQUAWK_LOG_LEVEL accept, in any case.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LEVELS_TEXT = "DEBUG, INFO, WARNING or ERROR"

# When a setting is read.
AT_START = "at start"
ON_RELOAD = "at start and on each reload"
PER_COMMAND = "each time the command runs"


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def octal_mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an octal mode like 660") from None
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"{text!r} is not a mode between 0 and 777")
    return mode


def log_level(text: str) -> str:
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level: expected {LEVELS_TEXT}")
    return level


def address(*, unix: bool) -> Callable[[str], str]:
    """An argparse type for a listen address (see `check_address`)."""

    def parse(text: str) -> str:
        # Imported here, not at the top: the config loader reads this table,
        # and sits below the server in the daemon's layers.
        from .server.lifecycle.listeners import check_address

        try:
            check_address(text, unix=unix)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return parse


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: where it may come from, its default and when it is read."""

    name: str
    # What a value must be, in words (the reference's "Accepts" column).
    accepts: str
    # The default, as the reference shows it.
    default: str
    read: str
    commands: tuple[str, ...] = ("serve",)
    flag: str | None = None
    env: str | None = None
    # The policy file's key, dotted, when the file may set it too.
    file_key: str | None = None
    # The flag's own argparse keywords (type, default, metavar, help, action).
    flag_options: Mapping[str, Any] = field(default_factory=dict)
    # The variable is the flag's default, read when the parser is made;
    # otherwise the command reads it after parsing (a bad value is then
    # named as the variable, not as the flag).
    env_is_default: bool = False
    # A line of its own in the reference, after the table.
    note: str = ""

    @property
    def variable(self) -> str:
        """The environment variable's name, for a row that has one."""
        assert self.env is not None, f"{self.name} is read from no variable"
        return self.env

    def add_flag(self, parser: argparse.ArgumentParser, **overrides: Any) -> None:
        """The flag on `parser`, with `overrides` of its argparse keywords."""
        assert self.flag is not None
        kwargs = dict(self.flag_options)
        if self.env_is_default and self.env is not None:
            kwargs["default"] = os.environ.get(self.env)
        parser.add_argument(self.flag, **(kwargs | overrides))


def _tls(name: str, what: str) -> Setting:
    env = f"SQUAWK_TLS_{name.upper().replace('-', '_')}"
    return Setting(
        f"tls_{name.replace('-', '_')}",
        "a PEM file's path",
        "off",
        f"{AT_START}; the file is re-read when it changes",
        flag=f"--tls-{name}",
        env=env,
        flag_options={
            "metavar": "FILE",
            "help": f"{what}; re-read when it changes (default: off; ${env})",
        },
        env_is_default=True,
    )


LOG_LEVEL = Setting(
    "log_level",
    LEVELS_TEXT + ", in any case",
    "INFO",
    PER_COMMAND,
    commands=("serve", "classify", "decide", "check-policy", "upstreams"),
    flag="--log-level",
    env="SQUAWK_LOG_LEVEL",
    flag_options={
        "type": log_level,
        "metavar": "LEVEL",
        "help": "DEBUG, INFO (the default; $SQUAWK_LOG_LEVEL), WARNING or ERROR",
    },
    note="A bad SQUAWK_LOG_LEVEL is logged and INFO kept; a bad --log-level stops the command.",
)
LISTEN = Setting(
    "listen",
    "HOST:PORT, unix:PATH (unix:///absolute/path too) or unix-abstract:NAME",
    DEFAULT_LISTEN,
    AT_START,
    flag="--listen",
    env="SQUAWK_LISTEN",
    flag_options={
        "action": "append",
        "type": address(unix=True),
        "metavar": "ADDR",
        "help": "address to listen on: HOST:PORT, unix:PATH (unix:///absolute/path too) or "
        f"unix-abstract:NAME; repeatable (default: $SQUAWK_LISTEN, comma-separated, or "
        f"{DEFAULT_LISTEN})",
    },
    note="--listen is repeatable; SQUAWK_LISTEN takes a comma-separated list. "
    "A bad address in either stops the start.",
)
GRACE = Setting(
    "grace_s",
    "seconds >= 0",
    f"{DEFAULT_GRACE_S:g}",
    AT_START,
    flag="--grace",
    flag_options={
        "type": seconds,
        "default": DEFAULT_GRACE_S,
        "metavar": "SECONDS",
        "help": "on SIGTERM or SIGINT, exit within this many seconds: the notice, the drain "
        "of calls in flight and the span flush all fit in it; keep it below the "
        f"platform's own limit (default: {DEFAULT_GRACE_S:g})",
    },
)
SHUTDOWN_NOTICE = Setting(
    "shutdown_notice_s",
    "seconds >= 0, at most --grace",
    "2, or half of --grace if that is shorter",
    AT_START,
    flag="--shutdown-notice",
    flag_options={
        "type": seconds,
        "metavar": "SECONDS",
        "help": "the first part of --grace, during which health reports NOT_SERVING but "
        "every call is still answered (default: 2, or half of --grace if that is shorter)",
    },
)
SOCKET_MODE = Setting(
    "socket_mode",
    "an octal mode, 0 to 777",
    f"{DEFAULT_SOCKET_MODE:o}",
    AT_START,
    flag="--socket-mode",
    flag_options={
        "type": octal_mode,
        "default": DEFAULT_SOCKET_MODE,
        "metavar": "OCTAL",
        "help": f"permissions of unix:// socket files (default: {DEFAULT_SOCKET_MODE:o}, "
        "owner and group)",
    },
)
METRICS_LISTEN = Setting(
    "metrics_listen",
    "HOST:PORT",
    "off",
    AT_START,
    flag="--metrics-listen",
    env="SQUAWK_METRICS_LISTEN",
    flag_options={
        "type": address(unix=False),
        "metavar": "HOST:PORT",
        "help": "serve Prometheus metrics over HTTP here (default: off; $SQUAWK_METRICS_LISTEN)",
    },
)
HEALTH_LISTEN = Setting(
    "health_listen",
    "HOST:PORT",
    "off",
    AT_START,
    flag="--health-listen",
    env="SQUAWK_HEALTH_LISTEN",
    flag_options={
        "type": address(unix=False),
        "metavar": "HOST:PORT",
        "help": "also serve grpc.health.v1, and nothing else, here: for probes that cannot "
        "reach a unix socket (default: off; $SQUAWK_HEALTH_LISTEN)",
    },
)
TLS_CERT = _tls("cert", "the server's certificate chain (PEM) for TCP listeners: turns TLS on")
TLS_KEY = _tls("key", "the server's private key (PEM), with --tls-cert")
TLS_CLIENT_CA = _tls("client-ca", "require client certificates signed by this CA (PEM): mutual TLS")
POLICY_POLL = Setting(
    "policy_poll_s",
    "seconds >= 0",
    f"{POLL_S:g}",
    AT_START,
    flag="--policy-poll",
    flag_options={
        "type": seconds,
        "default": POLL_S,
        "metavar": "SECONDS",
        "help": "how often to look for a changed policy file, which is then reloaded "
        f"(SIGHUP reloads at once) (default: {POLL_S:g})",
    },
)
DECISION_LOG = Setting(
    "decision_log",
    "a file's path (appended to), or - for stdout",
    "off",
    AT_START,
    flag="--decision-log",
    env="SQUAWK_DECISION_LOG",
    flag_options={
        "metavar": "PATH",
        "help": "write one JSON line per decision to PATH, or - for stdout "
        "(default: off; $SQUAWK_DECISION_LOG)",
    },
)
POLICY = Setting(
    "policy_path",
    "a policy file's path (YAML)",
    "the built-in policy",
    f"{AT_START}; the file is reloaded when it changes",
    commands=("serve", "classify", "decide"),
    flag="--policy",
    env="SQUAWK_POLICY",
    flag_options={
        "help": "policy file (YAML); default: $SQUAWK_POLICY, else the built-in policy",
    },
    env_is_default=True,
    note="check-policy takes the file as its argument instead.",
)


_BUILT_IN = builtin_profile("default")


def _step_retry(suffix: str, accepts: str, file_key: str) -> Setting:
    built_in = {
        "INITIAL_DELAY": format_duration(_BUILT_IN.backoff.initial),
        "MAX_DELAY": format_duration(_BUILT_IN.backoff.max),
        "MAX_ATTEMPTS": str(_BUILT_IN.max_attempts),
    }[suffix]
    return Setting(
        f"step_retry_{suffix.lower()}",
        accepts,
        f"the file's, else {built_in}",
        ON_RELOAD,
        commands=("serve", "classify", "decide", "check-policy --env"),
        env=ENV_PREFIXES[0] + suffix,
        file_key=file_key,
        note=f"{ENV_PREFIXES[1]}{suffix} is read too, for compatibility: the name the "
        f"executor framework's error-handling guide uses; {ENV_PREFIXES[0]}{suffix} wins. "
        "A bad value is logged and the file's value kept; every client's fallback "
        "reads it as well (docs/fallback.md).",
    )


STEP_RETRY = tuple(_step_retry(o.suffix, o.expected, o.file_key) for o in OVERRIDES)
_ANALYZER = ("serve", "classify", "decide", "check-policy --env")
# The analyzer: and state: sections, and their variables, apply at start
# only: a reload that changes them logs that a restart is needed.
_RESTART = f"{AT_START} (a change on reload needs a restart)"
ANALYZER_BACKEND = Setting(
    "analyzer_backend",
    "offline or openai",
    "the file's, else offline",
    _RESTART,
    commands=_ANALYZER,
    env="SQUAWK_ANALYZER_BACKEND",
    file_key="analyzer.backend",
    note="A bad value is logged and ignored; openai without a base URL and a model "
    "keeps the offline analyzer.",
)
ANALYZER_BASE_URL = Setting(
    "analyzer_base_url",
    "an http(s) URL",
    "the file's",
    _RESTART,
    commands=_ANALYZER,
    env="SQUAWK_ANALYZER_BASE_URL",
    file_key="analyzer.base_url",
)
ANALYZER_MODEL = Setting(
    "analyzer_model",
    "a model's name",
    "the file's",
    _RESTART,
    commands=_ANALYZER,
    env="SQUAWK_ANALYZER_MODEL",
    file_key="analyzer.model",
)
ANALYZER_API_KEY = Setting(
    "analyzer_api_key",
    "the model API's key",
    "the variable analyzer.api_key_env names, else the file's analyzer.api_key",
    _RESTART,
    commands=_ANALYZER,
    env="SQUAWK_ANALYZER_API_KEY",
    file_key="analyzer.api_key",
    note="Never logged; analyzer.api_key_env names another variable to read it from.",
)
STATE_URL = Setting(
    "state_url",
    "a redis://, rediss:// or unix:// URL, with its credentials",
    "the file's state.url; unset: the pod's own state",
    _RESTART,
    commands=_ANALYZER,
    env="SQUAWK_STATE_URL",
    file_key="state.url",
    note="Turns the Redis store on. A bad value stops the daemon, naming the variable "
    "and never the URL; credentials belong here, not in the file.",
)
STATE_POD = Setting(
    "state_pod",
    "the pod's name",
    "the file's state.pod",
    _RESTART,
    commands=_ANALYZER,
    env="SQUAWK_STATE_POD",
    file_key="state.pod",
    note="A bad value stops the daemon.",
)


def _state_file(name: str, what: str) -> Setting:
    return Setting(
        f"state_{name}",
        "a PEM file's path",
        f"the file's state.{name}; unset: {what}",
        _RESTART,
        commands=_ANALYZER,
        env=f"SQUAWK_STATE_{name.upper()}",
        file_key=f"state.{name}",
        note="",
    )


STATE_TLS_CA = replace(
    _state_file("tls_ca", "the system's trusted CAs"),
    note="For a rediss:// URL: the CA that signed the Redis server's certificate. A "
    "missing, unreadable or non-PEM file stops the daemon at start, naming the "
    "setting and the file.",
)
STATE_TLS_CERT = replace(
    _state_file("tls_cert", "no client certificate"),
    note="With state_tls_key, for a rediss:// URL: the client's certificate (mutual TLS).",
)
STATE_TLS_KEY = _state_file("tls_key", "no client certificate")
STATE_SENTINELS = Setting(
    "state_sentinels",
    "host:port pairs, separated by commas",
    "the file's state.sentinels; unset: state_url says where Redis is",
    _RESTART,
    commands=_ANALYZER,
    env="SQUAWK_STATE_SENTINELS",
    file_key="state.sentinels",
    note="Turns the Redis store on, through Redis Sentinel: the sentinels name the "
    "master of state_service_name (instead of state_url).",
)
STATE_SERVICE_NAME = Setting(
    "state_service_name",
    "the master's name, as the sentinels know it",
    "the file's state.service_name",
    _RESTART,
    commands=_ANALYZER,
    env="SQUAWK_STATE_SERVICE_NAME",
    file_key="state.service_name",
)

SETTINGS: tuple[Setting, ...] = (
    LOG_LEVEL,
    LISTEN,
    GRACE,
    SHUTDOWN_NOTICE,
    SOCKET_MODE,
    METRICS_LISTEN,
    HEALTH_LISTEN,
    TLS_CERT,
    TLS_KEY,
    TLS_CLIENT_CA,
    POLICY_POLL,
    DECISION_LOG,
    POLICY,
    *STEP_RETRY,
    ANALYZER_BACKEND,
    ANALYZER_BASE_URL,
    ANALYZER_MODEL,
    ANALYZER_API_KEY,
    STATE_URL,
    STATE_POD,
    STATE_TLS_CA,
    STATE_TLS_CERT,
    STATE_TLS_KEY,
    STATE_SENTINELS,
    STATE_SERVICE_NAME,
)


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """What `squawk serve` runs with: the policy file as loaded (with the
    environment's overrides), and every serve setting resolved (flag, else
    variable, else default). An embedded Daemon gives what it needs; the
    rest keep their defaults, except the shutdown notice, which is 0 here:
    only a deployment has health checkers to tell."""

    config: Config
    listen: tuple[str, ...] = (DEFAULT_LISTEN,)
    grace_s: float = DEFAULT_GRACE_S
    shutdown_notice_s: float = 0.0
    socket_mode: int = DEFAULT_SOCKET_MODE
    metrics_listen: str | None = None
    health_listen: str | None = None
    tls: TlsFiles | None = None
    policy_path: str | None = None
    policy_poll_s: float = POLL_S


def _cell(text: str | None) -> str:
    return f"`{text}`" if text else "-"


def reference() -> str:
    """docs/settings.md: the table, then each setting's note."""
    lines = [
        "# Settings",
        "",
        "<!-- Generated from sidecar/daemon/squawk/daemon/settings.py by",
        "     `python -m squawk.daemon.settings docs/settings.md`; edit the table there. -->",
        "",
        "Every setting the `squawk` command reads. A flag wins over its environment",
        "variable, and a variable over the policy file's key. The policy file's own",
        "fields (profiles, bounds) are in the policy spec.",
        "",
        "| Setting | Flag | Environment | Policy file | Default | Accepts | Read | Commands |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        cells = (
            s.name,
            _cell(s.flag),
            _cell(s.env),
            _cell(s.file_key),
            s.default,
            s.accepts,
            s.read,
            ", ".join(s.commands),
        )
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    lines += ["", "## Notes", ""]
    lines += [f"- **{s.name}**: {s.note}" for s in SETTINGS if s.note]
    lines += [
        "",
        "Tracing is configured by the standard OpenTelemetry variables (OTEL_SDK_DISABLED,",
        "OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT and _PROTOCOL,",
        "OTEL_SERVICE_NAME, OTEL_BSP_*), read at start by",
        "`squawk/daemon/server/telemetry/tracing.py` and the OpenTelemetry SDK.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m squawk.daemon.settings", description="write the settings reference"
    )
    parser.add_argument("path", type=Path, help="the reference's file, docs/settings.md")
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    args = parser.parse_args(argv)
    text = reference()
    if args.check:
        found = args.path.read_text(encoding="utf-8") if args.path.exists() else None
        if found != text:
            print(
                f"{args.path} is stale: run python -m squawk.daemon.settings {args.path}",
                file=sys.stderr,
            )
            return 1
        return 0
    args.path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
