"""The values the analyzers read and return.

JSON travels as plain Python values (dict/list/str/float/int/bool/None);
proto Structs are converted at the gRPC boundary only (see `wire`). Every
value here is frozen and built per call.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

__all__ = [
    "Analysis",
    "AnalysisRequest",
    "Json",
    "JsonObject",
    "Proposal",
    "Rejected",
    "Source",
    "Violation",
]

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
JsonObject: TypeAlias = "dict[str, Json]"

_EMPTY: Mapping[str, Json] = {}


class Source(enum.IntEnum):
    """Which analyzer answered; the numbers equal squawk.v1 AnalysisSource."""

    NONE = 1
    HEURISTIC = 2
    LLM = 3
    CONTEXTUAL = 4


@dataclass(frozen=True, slots=True)
class AnalysisRequest:
    """One failed call to analyse. `None` budgets mean "use the default (2)"."""

    http_status: int
    error_response: str = ""
    original_request: Mapping[str, Json] = field(default_factory=lambda: _EMPTY)
    parameter_schema: Mapping[str, Json] = field(default_factory=lambda: _EMPTY)
    protected_parameters: frozenset[str] = frozenset()
    dependency_results: Mapping[str, Mapping[str, Json]] = field(
        default_factory=lambda: dict[str, Mapping[str, Json]]()
    )
    user_query: str = ""
    capability_name: str = ""
    capability_description: str = ""
    step_id: str = ""
    validation_retries_used: int = 0
    max_validation_retries: int | None = None
    semantic_retries_used: int = 0
    max_semantic_retries: int | None = None


@dataclass(frozen=True, slots=True)
class Proposal:
    """What one analyzer would change, before the gates have seen it.

    `changes` maps top-level parameter names to their new values; `notes`
    says, per parameter, why (one clause each, used in the answer's reason).
    An empty proposal carries `why_not`: what stopped the analyzer, and,
    when a model failed to answer, `failure`: a short cause code (timeout,
    transport, rate_limited, server_error, http_error, bad_response,
    refusal, unparsable, error) for metrics.
    """

    source: Source
    changes: Mapping[str, Json] = field(default_factory=lambda: _EMPTY)
    notes: Mapping[str, str] = field(default_factory=lambda: dict[str, str]())
    why_not: str = ""
    failure: str = ""


@dataclass(frozen=True, slots=True)
class Rejected:
    parameter: str
    proposed_value: Json
    reason: str


@dataclass(frozen=True, slots=True)
class Analysis:
    should_retry: bool
    reason: str
    suggested_changes: Mapping[str, Json] = field(default_factory=lambda: _EMPTY)
    is_transient_error: bool = False
    source: Source = Source.NONE
    rejected_changes: tuple[Rejected, ...] = ()
    # Set when a configured model's layer-3 answer was not the fix: its
    # failure cause (see Proposal.failure), "refused" (the gates refused what
    # it proposed) or "no_fix" (it proposed nothing). For metrics and spans.
    model_fallback: str = ""


@dataclass(frozen=True, slots=True)
class Violation:
    """One CheckDispatch finding; `rule` is one of RULES in `guard`."""

    parameter: str
    rule: str
    message: str
