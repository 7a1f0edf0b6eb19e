"""Python client for the Squawk policy daemon."""

from squawk.policy import Action, Reason

from ._client import DEFAULT_CALL_TIMEOUT, AsyncSquawkClient, SquawkClient
from ._decision import Decision
from ._errors import SquawkError, StepError, StepFailed
from ._runner import StepCancelled, StepOptions, run_step, run_step_sync

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "Action",
    "AsyncSquawkClient",
    "Decision",
    "Reason",
    "SquawkClient",
    "SquawkError",
    "StepCancelled",
    "StepError",
    "StepFailed",
    "StepOptions",
    "run_step",
    "run_step_sync",
]
