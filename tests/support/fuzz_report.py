"""How the wire fuzz judges one answer, and what it keeps of a run.

A problem (`verdict`): INTERNAL or UNKNOWN; no answer within the call's
deadline; bytes protobuf cannot parse answered with anything but
INVALID_ARGUMENT; a well-formed request refused without naming its field
first; status details over 4 KiB. RESOURCE_EXHAUSTED (gRPC's 4 MiB message
limit, before any of our code) is fine.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import grpc

from fuzz_cases import Case

__all__ = ["Report", "verdict"]

MAX_DETAILS = 4096
EXAMPLES_PER_KIND = 3
SLOWEST = 5
# A refusal names its field first: `attempt: must be >= 1`, `requests[3].profile: ...`.
# The request's field first; a path into a Struct may go on with any key.
_FIELD_FIRST = re.compile(r"^[A-Za-z_]\w*(?:: |[.\[])")
S = grpc.StatusCode


def verdict(case: Case, code: grpc.StatusCode, details: str, malformed: bool) -> str | None:
    """What is wrong with this answer to this case, or None.

    `malformed`: protobuf itself cannot parse the case's bytes.
    """
    if code in (S.INTERNAL, S.UNKNOWN):
        return f"{code.name}: {details[:300]!r}"
    if code is S.DEADLINE_EXCEEDED:
        return "no answer within the call's deadline"
    if len(details) > MAX_DETAILS:
        return f"{code.name} with {len(details)} characters of details (limit {MAX_DETAILS})"
    if code is S.RESOURCE_EXHAUSTED:
        return None
    if malformed:
        if code is not S.INVALID_ARGUMENT:
            return f"malformed protobuf answered {code.name}, not INVALID_ARGUMENT"
        return None
    if code is S.INVALID_ARGUMENT and not _FIELD_FIRST.match(details):
        return f"INVALID_ARGUMENT without the field name first: {details[:200]!r}"
    if code not in (S.OK, S.INVALID_ARGUMENT):
        return f"unexpected {code.name}: {details[:200]!r}"
    return None


@dataclass
class Report:
    rpc: str
    seed: int
    statuses: Counter[str] = field(default_factory=Counter)
    # (case kind, status) -> n, kind being "random", "mutation" or "hostile".
    by_kind: Counter[tuple[str, str]] = field(default_factory=Counter)
    # Words of the labels of the cases judged ("hostile", "huge.10001",
    # "deep101", ...) and how many were malformed: what the run covered.
    words: Counter[str] = field(default_factory=Counter)
    malformed: int = 0
    problems: Counter[str] = field(default_factory=Counter)
    # Up to EXAMPLES_PER_KIND per problem kind, lowest case index first.
    examples: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    # What went wrong with the daemon itself: stalls, death, its logs.
    daemon: list[str] = field(default_factory=list)
    # Calls in flight when a stalled daemon was killed: not judged.
    lost: int = 0
    not_sent: int = 0
    slowest: list[tuple[float, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def judged(self) -> int:
        return sum(self.statuses.values())

    @property
    def failed(self) -> bool:
        return bool(self.problems or self.daemon or self.not_sent)

    def add(self, case: Case, code: grpc.StatusCode, details: str, malformed: bool) -> None:
        self.statuses[code.name] += 1
        self.by_kind[(case.label.split(":")[0], code.name)] += 1
        self.words.update(set(re.split(r"[:+]", case.label)))
        self.malformed += malformed
        problem = verdict(case, code, details, malformed)
        if problem is None:
            return
        kind = re.sub(r"\d+", "N", problem.split(":")[0])[:80]
        self.problems[kind] += 1
        shown = self.examples.setdefault(kind, [])
        what = f"seed={self.seed} index={case.index} {case.label} ({len(case.payload)} bytes)"
        shown.append((case.index, f"{what}: {problem}"))
        # The lowest indices: after a stall, the case that caused it comes first.
        shown.sort()
        del shown[EXAMPLES_PER_KIND:]

    def timed(self, case: Case, seconds: float) -> None:
        what = f"index={case.index} {case.label} ({len(case.payload)} bytes)"
        self.slowest.append((seconds, what))
        if len(self.slowest) > 4 * SLOWEST:
            self.slowest = sorted(self.slowest, reverse=True)[:SLOWEST]

    def summary(self) -> str:
        head = f"{self.rpc}: {self.judged} answers judged in {self.seconds:.1f} s"
        lines = [f"{head}, statuses {dict(self.statuses.most_common())}"]
        if self.lost:
            lines.append(f"  {self.lost} calls lost when a stalled daemon was killed")
        if self.not_sent:
            lines.append(f"  {self.not_sent} cases not sent (time budget or restarts spent)")
        for kind, n in self.problems.most_common():
            lines.append(f"  {n} x {kind}")
            lines += [f"      e.g. {example}" for _, example in self.examples[kind]]
        lines += [f"  daemon: {d}" for d in self.daemon]
        slowest = sorted(self.slowest, reverse=True)[:SLOWEST]
        lines += [f"  slow: {t:.2f} s {what}" for t, what in slowest]
        return "\n".join(lines)

    def as_json(self) -> dict[str, object]:
        kinds: dict[str, dict[str, int]] = {}
        for (kind, status), n in sorted(self.by_kind.items()):
            kinds.setdefault(kind, {})[status] = n
        return {
            "judged": self.judged,
            "lost_to_restarts": self.lost,
            "not_sent": self.not_sent,
            "malformed": self.malformed,
            "seconds": round(self.seconds, 1),
            "statuses": dict(sorted(self.statuses.items())),
            "by_kind": kinds,
            "problems": dict(self.problems.most_common()),
            "examples": {k: [e for _, e in v] for k, v in self.examples.items()},
            "daemon": self.daemon,
            "slowest_calls": [f"{t:.3f} s {w}" for t, w in sorted(self.slowest, reverse=True)][
                :SLOWEST
            ],
        }
