"""The floor for a Python gRPC daemon: a bare grpc.aio server that answers
every call with the request's bytes.

It runs with the daemon's own server options, read from
squawk/daemon/server/lifecycle/app.py's source rather than imported:
importing the daemon would load OpenTelemetry, Prometheus and the policy, and the floor's RSS
would then be the daemon's. The method takes and returns raw bytes (no
protobuf), so the floor is the gRPC transport and the event loop alone.

Usage: python -m bench.echo_server --listen 127.0.0.1:PORT [--uvloop]
Prints "ready" on stdout once it serves; stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib
import signal
from pathlib import Path

import grpc

__all__ = ["ECHO_METHOD", "server_options"]

APP = (
    Path(__file__).resolve().parent.parent
    / "sidecar"
    / "daemon"
    / "squawk"
    / "daemon"
    / "server"
    / "lifecycle"
    / "app.py"
)
SERVICE, METHOD = "squawk.bench.v1.Echo", "Echo"
# The same name bench/internal/raw.EchoMethod gives the Go floor.
ECHO_METHOD = f"/{SERVICE}/{METHOD}"

Option = tuple[str, int | str]


def server_options(source: Path = APP) -> list[Option]:
    """SERVER_OPTIONS as app.py assigns it; raise if it is not a literal."""
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if "SERVER_OPTIONS" in names and node.value is not None:
                options: list[Option] = ast.literal_eval(node.value)
                return options
    raise RuntimeError(f"no literal SERVER_OPTIONS in {source}; update bench/echo_server.py")


async def _echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


async def serve(listen: str) -> None:
    server = grpc.aio.server(options=server_options())
    # No (de)serializers: the handler gets and returns the wire bytes.
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(_echo)}
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(listen)
    await server.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    print("ready", listen, flush=True)
    await stopping.wait()
    await server.stop(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="host:port")
    parser.add_argument(
        "--uvloop",
        action="store_true",
        help="run on uvloop (must be installed); the floor should use the daemon's event loop",
    )
    args = parser.parse_args()
    if args.uvloop:
        # Optional, and only this flag needs it: not a project dependency.
        uvloop = importlib.import_module("uvloop")
        uvloop.run(serve(args.listen))
    else:
        asyncio.run(serve(args.listen))


if __name__ == "__main__":
    main()
