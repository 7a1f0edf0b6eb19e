"""Safe semantic correction (AnalyzeError) and the pre-dispatch guard (CheckDispatch).

Layers, each in its own module: `heuristic` (layer 3, offline), `llm`
(layer 3 with an OpenAI-compatible model: the only network I/O here),
`contextual` (layer 4), `gates` (what every suggestion must pass), `guard`
(CheckDispatch), `analyzer` (the order they run in).

What callers and models send is hostile input: `bounds` holds every limit
on it and `wire` enforces them on requests; `patterns` runs caller regexes
on RE2 only; `credentials` says what a secret is; `budget` caps the CPU
one analysis may spend on searches that are not linear; `worker` keeps all
of it off the event loop. Everything except `llm`, `analyzer`, `worker`
and `wire` is pure (the budget travels in a context variable).
"""

from . import wire
from .analyzer import DEFAULT_SEMANTIC_RETRIES, Analyzer
from .bounds import validate
from .guard import RULES, check_dispatch
from .llm import ModelBackend
from .settings import DEFAULT_API_KEY_ENV, AnalyzerSettings, Backend
from .types import Analysis, AnalysisRequest, Json, Proposal, Rejected, Source, Violation

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "DEFAULT_SEMANTIC_RETRIES",
    "RULES",
    "Analysis",
    "AnalysisRequest",
    "Analyzer",
    "AnalyzerSettings",
    "Backend",
    "Json",
    "ModelBackend",
    "Proposal",
    "Rejected",
    "Source",
    "Violation",
    "check_dispatch",
    "validate",
    "wire",
]
