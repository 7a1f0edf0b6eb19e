"""Python client for the Squawk policy daemon.

The request and response messages are squawk.v1's, re-exported here so an
executor needs one import; Action, Reason, Category and Criticality are
the policy core's enums, whose values equal the wire's.
"""

from squawk.policy import Action, BreakerState, Category, Criticality, Reason
from squawk.v1.policy_pb2 import (
    AnalyzeErrorRequest,
    AnalyzeErrorResponse,
    CheckDispatchRequest,
    CheckDispatchResponse,
    ClassifyRequest,
    ClassifyResponse,
    DecideRetryRequest,
    DecideRetryResponse,
    Event,
    ExplainDecisionRequest,
    ExplainDecisionResponse,
    FleetState,
    GetEventsRequest,
    GetEventsResponse,
    GetUpstreamsRequest,
    GetUpstreamsResponse,
    Outcome,
    UpstreamState,
)

from ._admission import Admission
from ._client import (
    DEFAULT_ANALYZE_TIMEOUT,
    DEFAULT_BATCH_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    AsyncSquawkClient,
    BatchResult,
    SquawkClient,
)
from ._decision import Decision
from ._errors import SquawkError, SquawkInputError, StepError, StepFailed
from ._runner import (
    ErrorInfo,
    StepCancelled,
    StepOptions,
    Tier,
    criticality,
    criticality_from_headers,
    run_step,
    run_step_sync,
)

__all__ = [
    "DEFAULT_ANALYZE_TIMEOUT",
    "DEFAULT_BATCH_TIMEOUT",
    "DEFAULT_CALL_TIMEOUT",
    "Action",
    "Admission",
    "AnalyzeErrorRequest",
    "AnalyzeErrorResponse",
    "AsyncSquawkClient",
    "BatchResult",
    "BreakerState",
    "Category",
    "CheckDispatchRequest",
    "CheckDispatchResponse",
    "ClassifyRequest",
    "ClassifyResponse",
    "Criticality",
    "DecideRetryRequest",
    "DecideRetryResponse",
    "Decision",
    "ErrorInfo",
    "Event",
    "ExplainDecisionRequest",
    "ExplainDecisionResponse",
    "FleetState",
    "GetEventsRequest",
    "GetEventsResponse",
    "GetUpstreamsRequest",
    "GetUpstreamsResponse",
    "Outcome",
    "Reason",
    "SquawkClient",
    "SquawkError",
    "SquawkInputError",
    "StepCancelled",
    "StepError",
    "StepFailed",
    "StepOptions",
    "Tier",
    "UpstreamState",
    "criticality",
    "criticality_from_headers",
    "run_step",
    "run_step_sync",
]
