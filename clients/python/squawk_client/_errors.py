"""The client's exceptions.

Exception
├── StepError             raised by the user's step to describe how it failed
├── StepFailed            raised by the runner when the policy ends the step
└── SquawkError           the daemon answered with an error (code and details)
    └── SquawkInputError  INVALID_ARGUMENT: `field` names the offending field
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._decision import Decision

__all__ = ["SquawkError", "SquawkInputError", "StepError", "StepFailed"]


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
    """The policy (or the error hook) ended the step.

    `decision` says why, `attempts` is how many times the step was called, and
    `__cause__` is the step's last error.
    """

    def __init__(self, decision: Decision, attempts: int = 1) -> None:
        super().__init__(f"{decision.reason.name}: {decision.explanation}")
        self.decision = decision
        self.attempts = attempts


class SquawkError(Exception):
    """The daemon answered with an error that a fallback must not paper over."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


class SquawkInputError(SquawkError):
    """A request the policy refuses (INVALID_ARGUMENT), from the daemon or the
    local fallback; `field` is the offending field's path, e.g. "attempt"."""

    def __init__(self, field: str, details: str) -> None:
        super().__init__("INVALID_ARGUMENT", details)
        self.field = field

    @classmethod
    def from_details(cls, details: str) -> SquawkInputError:
        # The daemon also sends a google.rpc.BadRequest naming the field; its
        # message starts with the same path, which spares this client the
        # googleapis-common-protos dependency.
        field, sep, _ = details.partition(": ")
        return cls(field if sep else "", details)
