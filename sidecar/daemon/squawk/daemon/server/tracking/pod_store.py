"""The state store seam: where the servicer reads and writes upstream state.

Two stores, chosen by the policy file's `state.store`:

- `PodStore` (memory, the default): the pod's own state (registry.py), in
  this process. Nothing here waits.
- `FleetStore` (redis, fleet_store.py): the pod's own state first, then the
  fleet's, shared with every pod on Redis, which can only make an answer
  more cautious. When Redis cannot answer within the deadline, the pod's own
  answer stands and is marked `local`.

Each call returns where its answer came from: None for the memory store,
else FLEET or LOCAL (the span's `squawk.state`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import timedelta

from squawk.policy import Admission, Decision, Outcome, Profile
from squawk.policy.fleet import FleetSnapshot
from squawk.wire import NO_ADMIT_ARGS, AdmitArgs

from .registry import Upstreams, UpstreamView

__all__ = ["PodStore", "Source"]


class Source(enum.StrEnum):
    # The fleet's state was read (or, for a write, the store is reachable).
    FLEET = "fleet"
    # The store was unreachable or late: the pod's own state decided.
    LOCAL = "local"


class PodStore:
    """The memory store: one pod's state, shared by its executors."""

    def __init__(self, upstreams: Upstreams) -> None:
        self.upstreams = upstreams

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def describe(self) -> str:
        return "memory"

    async def admit(
        self,
        profile: Profile,
        upstream: str,
        args: AdmitArgs = NO_ADMIT_ARGS,
    ) -> tuple[Admission, Source | None]:
        """`args`: the call's deadline, cost, permits, criticality and
        fairness key (squawk.wire.admit_args)."""
        admission = self.upstreams.admit(
            profile,
            upstream,
            args.deadline,
            args.cost,
            args.permits,
            criticality=args.criticality,
            fairness=args.fairness,
        )
        return admission, None

    async def after_failure(
        self,
        profile: Profile,
        upstream: str,
        outcome: Outcome,
        decision: Decision,
        deadline: timedelta | None,
    ) -> tuple[Decision, Source | None]:
        return self.upstreams.after_failure(profile, upstream, outcome, decision, deadline), None

    def record(self, outcomes: Sequence[tuple[Profile, str, Outcome]]) -> None:
        for profile, upstream, outcome in outcomes:
            self.upstreams.record(profile, upstream, outcome)

    def views(self, profile: str = "") -> list[UpstreamView]:
        return self.upstreams.views(profile)

    def fleet_views(self, profile: str = "") -> dict[tuple[str, str], FleetSnapshot]:
        """The fleet's view of each (profile, upstream) this pod has synced,
        as it last read it; empty for the memory store."""
        return {}
