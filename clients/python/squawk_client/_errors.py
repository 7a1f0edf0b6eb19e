"""The client's exceptions.

Exception
├── StepError       raised by the user's step to describe how it failed
├── StepFailed      raised by the runner when the policy says FAIL
└── SquawkError     the daemon refused a request (e.g. INVALID_ARGUMENT)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._decision import Decision

__all__ = ["SquawkError", "StepError", "StepFailed"]


class StepError(Exception):
    """A failed call, as the step saw it. Any other exception counts as a
    transport failure (no HTTP response arrived)."""

    def __init__(
        self,
        message: str,
        *,
        http_status: int = 0,
        transport_failure: bool = False,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.transport_failure = transport_failure
        self.body = body
        self.headers = dict(headers or {})


class StepFailed(Exception):
    """The policy ended the step; `decision` says why, `__cause__` is the last error."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(f"{decision.reason.name}: {decision.explanation}")
        self.decision = decision


class SquawkError(Exception):
    """The daemon answered with an error that a fallback must not paper over."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details
