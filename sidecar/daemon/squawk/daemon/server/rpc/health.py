"""grpc.health.v1 as the stock async servicer answers it, plus `List` and
a message on NOT_FOUND: the stock servicer leaves List unimplemented (with
a Python exception's text) and answers an unknown service with an empty
message.

It reads the stock servicer's `_server_status`, the one table every status
change goes through (graceful shutdown included); tests/e2e/test_first_run.py
fails if that changes.
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from squawk.policy.limits import MAX_NAME_CHARS
from squawk.policy.text import shown_text

__all__ = ["Health"]


class Health(health.aio.HealthServicer):
    def _statuses(self) -> dict[str, int]:
        table: dict[str, int] = self._server_status  # type: ignore[attr-defined]
        return table

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        statuses = self._statuses()
        status = statuses.get(request.service)
        if status is None:
            # The name is the caller's: shown redacted and bounded.
            known = ", ".join(repr(name) for name in sorted(statuses))
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"unknown service {shown_text(request.service, MAX_NAME_CHARS)!r}; known: {known}",
            )
        return health_pb2.HealthCheckResponse(status=status)

    async def List(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        # The stubs predate List; the generated module has its messages.
        reply = health_pb2.HealthListResponse()  # type: ignore[attr-defined]
        for name, status in self._statuses().items():
            reply.statuses[name].status = status
        return reply
