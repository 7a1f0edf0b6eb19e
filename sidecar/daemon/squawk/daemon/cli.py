"""The `squawk` command: run the daemon, or ask the policy a question.

`classify` and `decide` answer locally from the same core the daemon uses,
or from a running daemon with `--target`; either way they print the squawk.v1
response as proto3 JSON, so the two are directly comparable.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import IO

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from squawk.policy import PolicyInputError, parse_duration, redact
from squawk.policy.text import quoted
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

from . import settings, upstream_watch
from .config import ConfigError, load_config, load_policy, needs, parse_config, read_policy_file
from .dial import add_target_flags, check_local, hint, open_channel
from .event_list import list_events
from .explain import explain
from .local import classify_locally, decide_locally
from .pem import shown_path
from .server.lifecycle.app import BindError, Daemon, default_shutdown_notice
from .server.lifecycle.listeners import AddressError, check_address
from .server.lifecycle.reload import policy_hash
from .server.lifecycle.tls import TlsError, TlsFiles, check_files
from .server.telemetry.tracing import tracer_provider_from_env
from .top import SORTS, top
from .upstream_table import list_upstreams

__all__ = ["main"]

log = logging.getLogger("squawk")

LISTEN_ENV = settings.LISTEN.variable


class RedactingFormatter(logging.Formatter):
    """Every log line, tracebacks included, passes the secret redaction."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _headers(values: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in values:
        name, sep, value = item.partition(":")
        if not sep:
            raise PolicyInputError("--header", f"{item!r} is not NAME:VALUE")
        out[name.strip()] = value.strip()
    return out


def _env_log_level() -> tuple[str, str | None]:
    """SQUAWK_LOG_LEVEL's level, and the value to warn about if it is not one.

    Forgiving, like the other environment overrides: a wrong log level
    changes no decision, so INFO is kept rather than the daemon stopped."""
    value = os.environ.get(settings.LOG_LEVEL.variable, "")
    if not value.strip():
        return "INFO", None
    try:
        return settings.log_level(value), None
    except argparse.ArgumentTypeError:
        return "INFO", value


class StartError(ValueError):
    """A serve setting, from a flag or the environment, cannot be used; the
    message names the flag or variable."""


def _env_addresses(variable: str, *, unix: bool) -> list[str]:
    """The comma-separated addresses in `variable`; [] when it is unset.

    Unlike the forgiving overrides, a bad one stops the start, as a bad flag
    does: a daemon listening elsewhere than asked looks like one that is down."""
    addresses = [a.strip() for a in os.environ.get(variable, "").split(",") if a.strip()]
    for address in addresses:
        try:
            check_address(address, unix=unix)
        except ValueError as exc:
            raise StartError(f"{variable}: {exc}") from None
    return addresses


def _env_address(variable: str) -> str | None:
    """The one HOST:PORT in `variable`, or None when it is unset."""
    addresses = _env_addresses(variable, unix=False)
    if len(addresses) > 1:
        raise StartError(f"{variable}: expected one HOST:PORT, not {len(addresses)}")
    return addresses[0] if addresses else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="squawk", description=__doc__)
    log_level = argparse.ArgumentParser(add_help=False)
    # Before or after the subcommand alike; the subcommand's wins.
    settings.LOG_LEVEL.add_flag(log_level, default=argparse.SUPPRESS)
    # Unset: SQUAWK_LOG_LEVEL, read in _main, so that a bad value is named
    # as the variable rather than as this flag.
    settings.LOG_LEVEL.add_flag(parser, default=None)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the policy daemon", parents=[log_level])
    for setting in settings.SETTINGS:
        if setting.flag and setting.commands == ("serve",):
            setting.add_flag(serve)

    for name in ("classify", "decide"):
        cmd = sub.add_parser(name, help=f"print the {name} answer as JSON", parents=[log_level])
        add_target_flags(cmd, required=False, help="ask a running daemon at this address instead")
        cmd.add_argument(
            "--profile",
            default="",
            help="the policy's profile (built in: default, llm; a policy file may add more)",
        )
        cmd.add_argument("--status", type=int, default=0, help="HTTP status, 0 = unknown")
        cmd.add_argument("--transport-failure", action="store_true")
        cmd.add_argument("--header", action="append", default=[], metavar="NAME:VALUE")
        if name == "classify":
            cmd.add_argument("error_message", nargs="?", default="")
        else:
            cmd.add_argument("--attempt", type=int, required=True)
            cmd.add_argument("--max-attempts", type=int)
            cmd.add_argument("--body", default="", help="the component's response body")
            cmd.add_argument("--validation-retries-used", type=int, default=0)
            cmd.add_argument("--max-validation-retries", type=int)
            cmd.add_argument("--correction-available", action="store_true")
            cmd.add_argument("--hitl-approved", action="store_true")
            cmd.add_argument("--delegated-orchestrator", action="store_true")
            cmd.add_argument("--cancelled", action="store_true")
            cmd.add_argument("--deadline", help="time left for the step, e.g. 5s")
            cmd.add_argument("--capability", default="")
            cmd.add_argument("--upstream", default="")
    check = sub.add_parser(
        "check-policy",
        help="check a policy file offline, with the daemon's messages; exit 0 when valid",
        parents=[log_level],
    )
    check.add_argument("file", help="the policy file (YAML)")
    check.add_argument(
        "--env",
        action="store_true",
        help="check the file with this environment's SQUAWK_* variables, exactly as serve "
        "would (default: the file alone, listing what it leaves to the environment)",
    )
    upstreams = sub.add_parser(
        "upstreams",
        help="print the pod's state of every tracked upstream, as a table",
        parents=[log_level],
    )
    add_target_flags(upstreams, required=True, help="the running daemon's address")
    upstreams.add_argument("--profile", default="", help="only this profile's upstreams")
    upstreams.add_argument(
        "--fleet",
        action="store_true",
        help="add the fleet's view beside the pod's (the Redis store's last sync)",
    )
    upstreams.add_argument(
        "--watch",
        nargs="?",
        const=1.0,
        type=upstream_watch.interval,
        metavar="SECONDS",
        help="print the table again every SECONDS (default 1; 0.1 to 3600) until Ctrl-C: "
        "redrawn on a terminal, appended (plain) into a pipe or file",
    )
    upstreams.add_argument(
        "--count",
        type=upstream_watch.count,
        metavar="N",
        help="with --watch: stop after N tables (1 to 1,000,000)",
    )
    events = sub.add_parser(
        "events",
        help="print the pod's history of breaker transitions, pace changes, cool-downs and sheds, "
        "each with its cause",
        parents=[log_level],
    )
    add_target_flags(events, required=True, help="the running daemon's address")
    events.add_argument("--profile", default="", help="only this profile's events")
    events.add_argument("--upstream", default="", help="only the events of this upstream name")
    events.add_argument("--json", action="store_true", help="one line of JSON an event")
    events.add_argument(
        "--follow",
        action="store_true",
        help="go on printing new events every second until Ctrl-C, as tail -f",
    )
    why = sub.add_parser(
        "explain",
        help="why a step was refused: the decision an id names, its state and the events before it",
        parents=[log_level],
    )
    add_target_flags(why, required=True, help="the running daemon's address")
    why.add_argument(
        "decision_id",
        metavar="ID",
        help="the decision_id of a refused Admit or a FAIL (a runner's failure carries it)",
    )
    live = sub.add_parser(
        "top",
        help="a live view of every upstream: state, per-second counts and the latest events",
        parents=[log_level],
    )
    add_target_flags(live, required=True, help="the running daemon's address")
    live.add_argument("--profile", default="", help="only this profile's upstreams and events")
    live.add_argument(
        "--interval",
        type=upstream_watch.interval,
        default=1.0,
        metavar="SECONDS",
        help="seconds between refreshes (default 1; 0.1 to 3600)",
    )
    live.add_argument(
        "--count", type=upstream_watch.count, metavar="N", help="stop after N refreshes"
    )
    live.add_argument(
        "--sort",
        choices=SORTS,
        default="name",
        help="the order within the rows with trouble and the rest (default name; s cycles)",
    )
    for name in settings.POLICY.commands:
        settings.POLICY.add_flag(sub.choices[name])
    return parser


def _request(args: argparse.Namespace) -> Message:
    headers = _headers(args.header)
    if args.command == "classify":
        return pb.ClassifyRequest(
            error_message=args.error_message,
            http_status=args.status,
            transport_failure=args.transport_failure,
            headers=headers,
            profile=args.profile,
        )
    request = pb.DecideRetryRequest(
        attempt=args.attempt,
        http_status=args.status,
        transport_failure=args.transport_failure,
        response_body=args.body.encode(),
        headers=headers,
        validation_retries_used=args.validation_retries_used,
        correction_available=args.correction_available,
        hitl_approved=args.hitl_approved,
        delegated_orchestrator=args.delegated_orchestrator,
        cancelled=args.cancelled,
        capability=args.capability,
        upstream=args.upstream,
        profile=args.profile,
    )
    if args.max_attempts is not None:
        request.max_attempts = args.max_attempts
    if args.max_validation_retries is not None:
        request.max_validation_retries = args.max_validation_retries
    if args.deadline is not None:
        try:
            request.deadline.FromTimedelta(parse_duration(args.deadline))
        except ValueError as exc:
            raise PolicyInputError("--deadline", str(exc)) from None
    return request


def _tls(args: argparse.Namespace) -> TlsFiles | None:
    if not (args.tls_cert or args.tls_key or args.tls_client_ca):
        return None
    if not (args.tls_cert and args.tls_key):
        raise TlsError("--tls-cert and --tls-key go together (and --tls-client-ca needs both)")
    files = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca)
    try:
        check_files(files)  # fails here, with the file named, not at the bind
    except OSError as exc:
        raise TlsError(f"cannot read {shown_path(str(exc.filename))}: {exc.strerror}") from None
    except ValueError as exc:
        raise TlsError(str(exc)) from None
    return files


def _check_policy(path: str, with_env: bool) -> str:
    """The file checked as the daemon reads it. Without `with_env`, the file
    alone, so a CI job checks what the repository holds (it has no Secrets),
    with a line for each setting the environment must then give."""
    data, text = read_policy_file(path)
    if with_env:
        config = load_config(path, text=text)
        notes = []
    else:
        config = parse_config(text, path)
        notes = [f"{path}: {need.note()}" for need in needs(config)]
    profiles = ", ".join(sorted(config.policy.profiles))
    valid = f"{path}: valid (policy {policy_hash(data)}; profiles: {profiles})"
    return "\n".join([valid, *config.warnings, *notes])


def _ask(args: argparse.Namespace, request: Message) -> Message:
    if args.target:
        with open_channel(args) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            if isinstance(request, pb.ClassifyRequest):
                return stub.Classify(request, timeout=10)
            assert isinstance(request, pb.DecideRetryRequest)
            return stub.DecideRetry(request, timeout=10)
    check_local(args)
    policy = load_policy(args.policy)
    if isinstance(request, pb.ClassifyRequest):
        return classify_locally(policy, request)
    assert isinstance(request, pb.DecideRetryRequest)
    return decide_locally(policy, request)


def _open_decision_log(args: argparse.Namespace) -> IO[str] | None:
    path, name = args.decision_log, "--decision-log"
    if path is None:
        name = settings.DECISION_LOG.variable
        path = os.environ.get(name) or None
    if path is None:
        return None
    if path == "-":
        # The lines are UTF-8 JSON whatever the locale's encoding (a latin-1
        # stdout could not write an emoji in an upstream's name).
        stdout = sys.stdout.fileno()
        return open(stdout, "w", buffering=1, encoding="utf-8", closefd=False)
    try:
        return open(path, "a", buffering=1, encoding="utf-8")
    except OSError as exc:
        raise StartError(f"{name}: cannot open {shown_path(path)}: {exc.strerror}") from None


async def _serve(args: argparse.Namespace) -> None:
    # A flag wins over its variable; argparse has checked the flags.
    listen = args.listen or _env_addresses(LISTEN_ENV, unix=True) or [settings.DEFAULT_LISTEN]
    metrics_listen = args.metrics_listen or _env_address(settings.METRICS_LISTEN.variable)
    health_listen = args.health_listen or _env_address(settings.HEALTH_LISTEN.variable)
    config = load_config(args.policy)
    for warning in config.warnings:
        log.warning("%s", warning)
    log_file = _open_decision_log(args)
    try:
        tracing = tracer_provider_from_env(os.environ)
        serve = settings.ServeSettings(
            config,
            tuple(listen),
            grace_s=args.grace,
            shutdown_notice_s=args.shutdown_notice,
            socket_mode=args.socket_mode,
            metrics_listen=metrics_listen,
            health_listen=health_listen,
            tls=_tls(args),
            policy_path=args.policy,
            policy_poll_s=args.policy_poll,
        )
        daemon = Daemon(serve, tracing=tracing, decision_log=log_file)
        try:
            await daemon.start()
        except AddressError as exc:
            raise StartError(f"{'--listen' if args.listen else LISTEN_ENV}: {exc}") from None
        await daemon.run_until_stopped()
    finally:
        if log_file is not None:
            log_file.close()  # stdout's wrapper leaves the descriptor open


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`squawk decide ... | head`): not an error of
        # ours. Python would report it again at exit, flushing stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        if args.shutdown_notice is None:
            args.shutdown_notice = default_shutdown_notice(args.grace)
        elif args.shutdown_notice > args.grace:
            parser.error(
                f"--shutdown-notice ({args.shutdown_notice:g}s) must not exceed "
                f"--grace ({args.grace:g}s): the notice is part of the grace period"
            )
    if args.command == "upstreams" and args.count is not None and args.watch is None:
        parser.error("--count needs --watch")
    level, ignored = (args.log_level, None) if args.log_level else _env_log_level()
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    # These speak once per call at DEBUG (grpc's "Loaded running loop") or
    # INFO (httpx's every model request), which buries the daemon's own lines;
    # their warnings and errors still show. squawk.* follows the level above.
    for chatty in ("grpc._cython", "httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    if ignored is not None:
        log.warning(
            "ignoring %s=%s: expected %s; logging at INFO",
            settings.LOG_LEVEL.env,
            quoted(ignored),
            settings.LEVELS_TEXT,
        )
    try:
        if args.command == "serve":
            asyncio.run(_serve(args))
            return 0
        if args.command == "upstreams":
            if args.watch is not None:
                return upstream_watch.watch(args, sys.stdout, sys.stderr)
            print(list_upstreams(args))
            return 0
        if args.command == "explain":
            return explain(args, sys.stdout)
        if args.command == "top":
            return top(args, sys.stdout, sys.stderr)
        if args.command == "events":
            return list_events(args, sys.stdout, sys.stderr)
        if args.command == "check-policy":
            print(_check_policy(args.file, args.env))
            return 0
        response = _ask(args, _request(args))
    except ConfigError as exc:
        print(f"squawk: bad policy: {exc}", file=sys.stderr)
        return 2
    except BindError as exc:
        print(f"squawk: {exc}", file=sys.stderr)
        return 3
    except TlsError as exc:
        print(f"squawk: TLS: {exc}", file=sys.stderr)
        return 2
    except StartError as exc:
        print(f"squawk: {exc}", file=sys.stderr)
        return 2
    except PolicyInputError as exc:
        print(f"squawk: invalid input: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"squawk: {exc.code().name}: {exc.details()}{hint(args, exc)}", file=sys.stderr)
        return 2 if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
    print(json_format.MessageToJson(response, always_print_fields_with_no_presence=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
