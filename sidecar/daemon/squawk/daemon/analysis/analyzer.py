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

Every CPU step runs on the analysis worker thread (see `worker`), charged
to one CPU budget per analysis (see `budget`); only the model's network
calls run on the event loop.
"""

from __future__ import annotations

from dataclasses import replace

from squawk.policy import Policy, redact, status_from_text
from squawk.policy.text import shown_text

from . import contextual, heuristic, hints
from .bounds import validate
from .budget import Budget, scope
from .credentials import redacted
from .gates import CREDENTIAL_REFUSED, MAX_VALUE_CHARS, check_changes, check_result
from .llm import ModelBackend
from .prompt import Mode
from .settings import AnalyzerSettings
from .types import Analysis, AnalysisRequest, Json, Proposal, Rejected, Source, Violation
from .values import canonical
from .worker import Worker

__all__ = ["DEFAULT_SEMANTIC_RETRIES", "Analyzer"]

DEFAULT_SEMANTIC_RETRIES = 2
# How many refused changes an answer lists; the reason counts the rest.
MAX_REJECTED = 64

_LABEL = {
    Source.HEURISTIC: "the offline analyzer",
    Source.LLM: "the model",
    Source.CONTEXTUAL: "contextual re-resolution",
}


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

    def _refusals(self) -> tuple[tuple[Rejected, ...], str]:
        """The refusals as the answer shows them, and a clause for the reason ("" if none).

        Echoed back redacted (a refused value may be the very credential a
        model tried to plant) and at most MAX_REJECTED of them.
        """
        shown = tuple(
            Rejected(
                _short(redact(r.parameter), 200), _echo(r.proposed_value), _short(r.reason, 300)
            )
            for r in self.rejected[:MAX_REJECTED]
        )
        clauses = []
        refused = CREDENTIAL_REFUSED
        credentials = [r.parameter for r in self.rejected if r.reason.startswith(refused)]
        if credentials:
            names = ", ".join(dict.fromkeys(_short(n) for n in credentials[:5]))
            clauses.append(f"a change to a credential was refused ({names})")
        if len(self.rejected) > MAX_REJECTED:
            more = len(self.rejected) - MAX_REJECTED
            clauses.append(f"{more} more refused changes are not listed")
        return shown, "; ".join(clauses)

    def finish(self) -> Analysis:
        if self.fixed:
            order = list(dict.fromkeys(self.sources[name] for name in self.pending))
            who = " and ".join(_LABEL[s] for s in order)
            what = "; ".join(self.notes[name] for name in self.pending)
            verb = "suggests" if len(order) == 1 else "suggest"
            rejected, refusals = self._refusals()
            return Analysis(
                should_retry=True,
                reason=_sentence(f"{who.capitalize()} {verb} {what}", refusals),
                suggested_changes=dict(self.pending),
                source=order[-1],
                rejected_changes=rejected,
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
        rejected, refusals = self._refusals()
        return Analysis(
            should_retry=False,
            reason=_sentence(f"No safe correction: {reasons}", refusals),
            rejected_changes=rejected,
            model_fallback=self.model_fallback,
        )


def _sentence(text: str, last: str = "", limit: int = 600) -> str:
    """One redacted sentence of at most `limit` characters; `last` stays whole at its end."""
    tail = f"; {last}" if last else ""
    text = redact(" ".join(text.split())).rstrip(".")
    room = limit - len(tail) - 1
    if len(text) > room:
        text = text[: room - 1] + "…"
    end = "" if text.endswith("…") and not tail else "."
    return redact(text + tail + end)


def _short(text: str, limit: int = 40) -> str:
    return shown_text(text, limit - 1) if len(text) > limit else redact(text)


def _echo(value: Json) -> Json:
    """A refused value as the answer shows it: redacted, and a note instead when oversized."""
    size = len(canonical(value))
    if size > MAX_VALUE_CHARS:
        return f"(not shown: {size} characters of JSON)"
    return redacted(value)


class Analyzer:
    """Runs AnalyzeError. Holds the model backend (and its HTTP client) when one is set."""

    def __init__(
        self,
        settings: AnalyzerSettings,
        policy: Policy,
        *,
        model: ModelBackend | None = None,
        worker: Worker | None = None,
    ) -> None:
        self.settings = settings
        self._step = policy.profile("default")
        self._max_error_bytes = policy.max_body_bytes
        # Every CPU step of an analysis, and of a CheckDispatch too large for
        # the loop, runs here, never on the event loop.
        self.worker = worker or Worker()
        if model is None and settings.uses_model:
            model = ModelBackend(settings, policy.profile("llm"), worker=self.worker)
        self._model = model

    def use_policy(self, policy: Policy) -> None:
        """The step limits of a reloaded policy; the model backend keeps the
        `llm` profile it started with (its client is built once)."""
        self._step = policy.profile("default")
        self._max_error_bytes = policy.max_body_bytes

    async def aclose(self) -> None:
        if self._model is not None:
            await self._model.aclose()
        self.worker.close()

    def skip(self, request: AnalysisRequest) -> Analysis | None:
        """The answer when nothing may be analysed, else None."""
        # As much as the analyzers read: scanning a megabyte for a status
        # held the GIL (and so the event loop) for 80 ms.
        text = request.error_response[: hints.MAX_ERROR_CHARS]
        status = request.http_status or status_from_text(text)
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
        limit = request.max_validation_retries
        limit = self._step.max_validation_retries if limit is None else limit
        if request.validation_retries_used >= limit:
            return Analysis(
                False,
                f"The correction budget is spent: {request.validation_retries_used} "
                f"of {limit} corrections are already used.",
            )
        return None

    def analyze_now(self, request: AnalysisRequest) -> Analysis | None:
        """The whole analysis on the calling thread, or None when a model is set.

        For a request `wire.analysis_small` let through: the offline analysis
        of one costs less than handing it to the worker and back.
        """
        if self._model is not None:
            return None
        with scope(Budget()):
            return self._offline(request)

    async def analyze(self, request: AnalysisRequest) -> Analysis:
        # A fresh CPU budget per analysis; the worker's steps charge it.
        with scope(Budget()):
            return await self._analyze(request)

    def _check(self, request: AnalysisRequest) -> Analysis | None:
        validate(request, self._max_error_bytes)
        return self.skip(request)

    def _offline_fix(self, run: _Run) -> None:
        """Layer 3 offline, unless an earlier layer already fixed the call."""
        if not run.fixed:
            run.offer(heuristic.propose(run.request, run.request.error_response))

    def _offline_layer4(self, run: _Run) -> bool:
        """Layer 4 offline; False when its budget is spent and nothing more may run."""
        request = run.request
        limit = request.max_semantic_retries
        limit = DEFAULT_SEMANTIC_RETRIES if limit is None else limit
        if request.semantic_retries_used >= limit:
            run.why_not.append(
                f"contextual re-resolution: its budget is spent "
                f"({request.semantic_retries_used} of {limit} used)"
            )
            return False
        run.offer(contextual.propose(request, request.error_response, run.pending))
        return True

    def _offline(self, request: AnalysisRequest) -> Analysis:
        """The whole analysis without a model: one step on the worker, no handoffs."""
        skipped = self._check(request)
        if skipped is not None:
            return skipped
        run = _Run(request)
        self._offline_fix(run)
        if not run.fixed and request.dependency_results:
            self._offline_layer4(run)
        return run.finish()

    async def _analyze(self, request: AnalysisRequest) -> Analysis:
        work = self.worker.run
        if self._model is None:
            return await work(self._offline, request)
        model = self._model
        skipped = await work(self._check, request)
        if skipped is not None:
            return skipped
        run = _Run(request)
        proposal = await model.propose(request, request.error_response, Mode.CORRECT)
        await work(run.offer, proposal)
        if not run.fixed and not run.model_fallback:
            # The model answered, but not with a fix: say which way, for metrics.
            run.model_fallback = "refused" if proposal.changes else "no_fix"
        await work(self._offline_fix, run)
        if run.fixed or not request.dependency_results:
            return await work(run.finish)
        if await work(self._offline_layer4, run) and not run.fixed:
            contextual_proposal = await model.propose(
                run.with_pending(), request.error_response, Mode.CONTEXTUAL
            )
            await work(run.offer, contextual_proposal)
        return await work(run.finish)
