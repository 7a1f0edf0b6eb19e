"""A TLS terminator on loopback in front of a plain server: what makes a
Redis without TLS built in (the valkey-server the dev set-up ships) a
`rediss://` server for the fleet tests.

The proxy does a real TLS handshake with `ssl.SSLContext`, with its own
certificate and, given a CA, `CERT_REQUIRED` for the client's (mutual TLS),
then pipes each connection's bytes both ways to the plain server's port. A
client the handshake refuses never reaches that server. It runs an asyncio
loop on its own thread; every wait is bounded, and `stop` closes the
listener and every connection it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from pathlib import Path

__all__ = ["TlsProxy"]

HANDSHAKE_S = 5.0  # a client that starts no handshake is dropped after this
CONNECT_S = 5.0  # to reach the plain server
STOP_S = 10.0  # to start, and to stop


class TlsProxy:
    """TLS on a free loopback port (`port`), piped to `127.0.0.1:target_port`."""

    def __init__(
        self, target_port: int, cert: Path, key: Path, client_ca: Path | None = None
    ) -> None:
        self.target_port = target_port
        self.port = 0
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert, key)
        if client_ca is not None:
            self._context.verify_mode = ssl.CERT_REQUIRED
            self._context.load_verify_locations(client_ca)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="tls-proxy", daemon=True)
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._failure: BaseException | None = None

    def start(self) -> TlsProxy:
        self._thread.start()
        if not self._ready.wait(STOP_S):
            raise TimeoutError(f"the TLS proxy did not listen within {STOP_S} s")
        if self._failure is not None:
            raise RuntimeError("the TLS proxy did not start") from self._failure
        return self

    def stop(self) -> None:
        if self._thread.ident is None:  # never started
            return
        if self._thread.is_alive() and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(STOP_S)
        if self._thread.is_alive():
            raise TimeoutError(f"the TLS proxy did not stop within {STOP_S} s")

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # seen by start(), which re-raises it
            self._failure = exc
        finally:
            self._ready.set()
            self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(
            self._pipe,
            "127.0.0.1",
            0,
            ssl=self._context,
            ssl_handshake_timeout=HANDSHAKE_S,
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            await asyncio.wait_for(server.wait_closed(), STOP_S)
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if pending:
                await asyncio.wait(pending, timeout=STOP_S)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client, past its handshake: its bytes to the server and back."""
        self._writers.add(writer)
        try:
            target_reader, target_writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", self.target_port), CONNECT_S
            )
        except (OSError, TimeoutError):
            self._close(writer)
            return
        self._writers.add(target_writer)
        copies = [
            asyncio.create_task(_copy(reader, target_writer)),
            asyncio.create_task(_copy(target_reader, writer)),
        ]
        try:
            # Either side ending ends the connection, as a direct one would.
            await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for copy in copies:
                copy.cancel()
            await asyncio.gather(*copies, return_exceptions=True)
            self._close(target_writer)
            self._close(writer)

    def _close(self, writer: asyncio.StreamWriter) -> None:
        self._writers.discard(writer)
        writer.transport.abort()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
