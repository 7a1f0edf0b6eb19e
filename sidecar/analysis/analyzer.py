"""AnalyzeError: the skip rules, then layer 3, then layer 4, every answer gated.

    validate -> skip? (401/403/405, 408/429/5xx, budget spent)
             -> layer 3: the model if configured, else (or when it fails,
                declines, or all its changes are refused) the offline analyzer
             -> layer 4, when layer 3 could not fix and dependency results
                are given: offline re-resolution, then the model
             -> gates on every proposal, CheckDispatch on the merged result

The HTTP status decides whether anything is analysed at all: a model can
never turn a 4xx transient, or a 429 into a correction. Later layers build
on what earlier layers fixed (a type fixed by layer 3 stays fixed while
layer 4 fills a missing value), and the answer's source is the layer that
completed the fix.
"""

from __future__ import annotations

from dataclasses import replace

from ..policy import Policy, PolicyInputError, redact, status_from_text
from ..policy.classify import check_status
from ..policy.profiles import DEFAULT_MAX_BODY_BYTES
from . import contextual, heuristic
from .gates import check_changes, check_result
from .llm import ModelBackend
from .prompt import Mode
from .settings import AnalyzerSettings
from .types import Analysis, AnalysisRequest, Json, Proposal, Rejected, Source, Violation

__all__ = ["DEFAULT_SEMANTIC_RETRIES", "Analyzer", "validate"]

DEFAULT_SEMANTIC_RETRIES = 2

_LABEL = {
    Source.HEURISTIC: "the offline analyzer",
    Source.LLM: "the model",
    Source.CONTEXTUAL: "contextual re-resolution",
}


def validate(request: AnalysisRequest, max_error_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """Raise PolicyInputError naming the first field AnalyzeError cannot accept."""
    check_status(request.http_status)
    for name in ("validation_retries_used", "semantic_retries_used"):
        used = getattr(request, name)
        if used < 0:
            raise PolicyInputError(name, f"must be >= 0, got {used}")
    for name in ("max_validation_retries", "max_semantic_retries"):
        budget = getattr(request, name)
        if budget is not None and budget < 0:
            raise PolicyInputError(name, f"must be >= 0 when set, got {budget}")
    size = len(request.error_response.encode())
    if size > max_error_bytes:
        raise PolicyInputError(
            "error_response", f"{size} bytes is over the limit of {max_error_bytes} bytes"
        )
    if any(not p for p in request.protected_parameters):
        raise PolicyInputError("protected_parameters", "must not contain an empty name")


class _Run:
    """One analysis: what the layers proposed, what the gates kept, and why not."""

    def __init__(self, request: AnalysisRequest) -> None:
        self.request = request
        self.pending: dict[str, Json] = {}
        self.notes: dict[str, str] = {}
        self.sources: dict[str, Source] = {}
        self.rejected: list[Rejected] = []
        self.why_not: list[str] = []
        self.remaining: tuple[Violation, ...] = ()
        self.model_fallback = ""

    @property
    def fixed(self) -> bool:
        return bool(self.pending) and not self.remaining

    def offer(self, proposal: Proposal) -> None:
        label = _LABEL[proposal.source]
        if proposal.why_not:
            self.why_not.append(f"{label}: {proposal.why_not}")
        if proposal.failure and not self.model_fallback:
            self.model_fallback = proposal.failure
        accepted, rejected = check_changes(proposal.changes, self.request, self.pending)
        self.rejected += rejected
        if rejected and not accepted:
            names = ", ".join(r.parameter for r in rejected[:5])
            self.why_not.append(f"{label}: every change it proposed was refused ({names})")
        for name, value in accepted.items():
            self.pending[name] = value
            self.notes[name] = proposal.notes.get(name, name)
            self.sources[name] = proposal.source
        if self.pending:
            kept, refused, self.remaining = check_result(self.pending, self.request)
            self.rejected += refused
            self.pending = kept

    def with_pending(self) -> AnalysisRequest:
        merged = {**self.request.original_request, **self.pending}
        return replace(self.request, original_request=merged)

    def finish(self) -> Analysis:
        if self.fixed:
            order = list(dict.fromkeys(self.sources[name] for name in self.pending))
            who = " and ".join(_LABEL[s] for s in order)
            what = "; ".join(self.notes[name] for name in self.pending)
            verb = "suggests" if len(order) == 1 else "suggest"
            return Analysis(
                should_retry=True,
                reason=_sentence(f"{who.capitalize()} {verb} {what}"),
                suggested_changes=dict(self.pending),
                source=order[-1],
                rejected_changes=tuple(self.rejected),
                model_fallback=self.model_fallback,
            )
        if self.pending:
            blocker = self.remaining[0].message.rstrip(".")
            self.rejected += [
                Rejected(n, v, f"the corrected call would still fail CheckDispatch: {blocker}")
                for n, v in self.pending.items()
            ]
            self.why_not.append(f"the corrected call would still fail CheckDispatch ({blocker})")
        reasons = "; ".join(self.why_not) or "no analyzer found a safe correction"
        return Analysis(
            should_retry=False,
            reason=_sentence(f"No safe correction: {reasons}"),
            rejected_changes=tuple(self.rejected),
            model_fallback=self.model_fallback,
        )


def _sentence(text: str, limit: int = 600) -> str:
    text = redact(" ".join(text.split()))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text if text.endswith((".", "…")) else text + "."


class Analyzer:
    """Runs AnalyzeError. Holds the model backend (and its HTTP client) when one is set."""

    def __init__(
        self,
        settings: AnalyzerSettings,
        policy: Policy,
        *,
        model: ModelBackend | None = None,
    ) -> None:
        self.settings = settings
        self._step = policy.profile("default")
        self._max_error_bytes = policy.max_body_bytes
        if model is None and settings.uses_model:
            model = ModelBackend(settings, policy.profile("llm"))
        self._model = model

    async def aclose(self) -> None:
        if self._model is not None:
            await self._model.aclose()

    def skip(self, request: AnalysisRequest) -> Analysis | None:
        """The answer when nothing may be analysed, else None."""
        status = request.http_status or status_from_text(request.error_response)
        if status in self._step.terminal_statuses:
            return Analysis(
                False,
                f"HTTP {status} is an authentication or method error; "
                "no parameter change can fix it.",
            )
        if status == 0 or status in self._step.transient_statuses:
            what = "No HTTP status is known" if status == 0 else f"HTTP {status} is transient"
            return Analysis(
                False,
                f"{what}; resend the same payload after backoff, do not change parameters.",
                is_transient_error=True,
            )
        if not 400 <= status < 500:
            return Analysis(False, f"HTTP {status} is not a client error; there is nothing to fix.")
        budget = request.max_validation_retries
        budget = self._step.max_validation_retries if budget is None else budget
        if request.validation_retries_used >= budget:
            return Analysis(
                False,
                f"The correction budget is spent: {request.validation_retries_used} "
                f"of {budget} corrections are already used.",
            )
        return None

    async def analyze(self, request: AnalysisRequest) -> Analysis:
        validate(request, self._max_error_bytes)
        skipped = self.skip(request)
        if skipped is not None:
            return skipped
        error = request.error_response
        run = _Run(request)
        if self._model is not None:
            proposal = await self._model.propose(request, error, Mode.CORRECT)
            run.offer(proposal)
            if not run.fixed and not run.model_fallback:
                # The model answered, but not with a fix: say which way, for metrics.
                run.model_fallback = "refused" if proposal.changes else "no_fix"
        if not run.fixed:
            run.offer(heuristic.propose(request, error))
        if run.fixed:
            return run.finish()
        if request.dependency_results:
            await self._layer4(request, run)
        return run.finish()

    async def _layer4(self, request: AnalysisRequest, run: _Run) -> None:
        budget = request.max_semantic_retries
        budget = DEFAULT_SEMANTIC_RETRIES if budget is None else budget
        if request.semantic_retries_used >= budget:
            run.why_not.append(
                f"contextual re-resolution: its budget is spent "
                f"({request.semantic_retries_used} of {budget} used)"
            )
            return
        run.offer(contextual.propose(request, request.error_response, run.pending))
        if not run.fixed and self._model is not None:
            with_pending = run.with_pending()
            run.offer(
                await self._model.propose(with_pending, request.error_response, Mode.CONTEXTUAL)
            )
