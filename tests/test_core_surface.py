"""The policy core's public surface: `squawk.policy.__all__`, pinned here,
and each module's own `__all__`, the only names code outside the core may
import from it (every other name is private to the core; its tests may
still reach in)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import squawk.policy

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "sidecar" / "core" / "squawk" / "policy"
# First-party code outside the core: the daemon, the wire conversions, the
# Python client and the benchmark.
USERS = [
    ROOT / "sidecar" / "daemon",
    ROOT / "sidecar" / "core" / "squawk" / "wire",
    ROOT / "clients" / "python" / "squawk_client",
    ROOT / "bench",
]


def test_the_public_names_are_pinned() -> None:
    assert sorted(squawk.policy.__all__) == sorted(
        [
            "REDACTED",
            "Action",
            "Admission",
            "AttemptState",
            "BackoffConfig",
            "BreakerConfig",
            "BreakerState",
            "Category",
            "Classification",
            "Criticality",
            "Decision",
            "Failure",
            "Fairness",
            "FleetAnswer",
            "Jitter",
            "Outcome",
            "Pace",
            "PaceSample",
            "PaceSnapshot",
            "PaceSource",
            "Pacer",
            "Policy",
            "PolicyInputError",
            "Profile",
            "Quota",
            "RateLimitConfig",
            "RateLimitHint",
            "RatioBudgetConfig",
            "Reason",
            "RetryBudgetConfig",
            "TokenBucketConfig",
            "UpstreamConfig",
            "UpstreamSnapshot",
            "UpstreamState",
            "admit",
            "builtin_policy",
            "builtin_profile",
            "classify",
            "counts_as_failure",
            "decide",
            "delay",
            "guard_fleet",
            "guard_retry",
            "is_idle",
            "observe",
            "pace",
            "pacer_is_idle",
            "pacer_snapshot",
            "parse_duration",
            "pushback_refuses",
            "rate_limit_hint",
            "record_outcome",
            "redact",
            "retry_after",
            "status_from_text",
            "upstream_snapshot",
            "validate",
        ]
    )
    assert all(hasattr(squawk.policy, name) for name in squawk.policy.__all__)


def _module_exports() -> dict[str, frozenset[str]]:
    """Each core module's `__all__`, by its dotted name."""
    out = {}
    for path in sorted(CORE.glob("*.py")):
        if path.stem == "__init__":
            continue
        name = f"squawk.policy.{path.stem}"
        module = importlib.import_module(name)
        exported = module.__dict__.get("__all__")
        assert exported is not None, f"{name} states no __all__"
        missing = [n for n in exported if not hasattr(module, n)]
        assert not missing, f"{name}.__all__ names what it does not define: {missing}"
        out[name] = frozenset(exported)
    return out


def test_code_outside_the_core_imports_only_what_a_module_exports() -> None:
    exports = _module_exports() | {"squawk.policy": frozenset(squawk.policy.__all__)}
    private = []
    for folder in USERS:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module in exports:
                    private += [
                        f"{path.relative_to(ROOT)}: {node.module}.{alias.name}"
                        for alias in node.names
                        if alias.name not in exports[node.module]
                    ]
    assert private == []
