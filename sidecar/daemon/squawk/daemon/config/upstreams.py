"""A profile's upstream-state settings in the policy file.

```yaml
profiles:
  default:
    circuit_breaker: {enabled: true, failure_ratio: 0.5, minimum_calls: 10, window: 60s,
                      buckets: 10, open_for: 30s, half_open_probes: 5, close_ratio: 0.6,
                      count_throttling: false}
    retry_budget: {kind: ratio, ratio: 0.2, min_per_second: 10, ttl: 10s}
    # or:         {kind: token_bucket, max_tokens: 10, token_ratio: 0.1}
    share_retry_after: true
    max_cool_down: 5m           # the longest one shared Retry-After cools it (1s..24h)
    rate_limit: {rate: 50, burst: 10, token_rate: 30000, token_burst: 60000, learn: true,
                 quiet: 30s, max_queue_delay: 1s, concurrency: true,
                 max_in_flight: 4,
                 criticality: CRITICAL}   # the pacer; criticality: of calls that send none
    upstreams:                  # per-upstream overrides of the five above
      amadeus:
        circuit_breaker: {open_for: 10s}
        rate_limit: {rate: 5}
```

Every field is optional and overrides only itself: an `upstreams` entry
starts from its profile's settings, a `retry_budget` from the profile's
budget when `kind` is the same (else from that kind's defaults). This
module converts types; the bounds are the core's (BreakerConfig and the
budget configs refuse a value out of bounds), reported here with the
field's path and line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, TypeVar

import yaml

from squawk.policy import (
    BreakerConfig,
    Criticality,
    PolicyInputError,
    Profile,
    RateLimitConfig,
    RatioBudgetConfig,
    RetryBudgetConfig,
    TokenBucketConfig,
    UpstreamConfig,
    parse_duration,
)
from squawk.policy.env import Malformed
from squawk.policy.limits import MAX_NAME_CHARS
from squawk.policy.text import quoted

from ._yaml import (
    ConfigError,
    boolean,
    did_you_mean,
    integer,
    mapping,
    number,
    scalar,
    shown_name,
    where,
)

__all__ = ["UPSTREAM_FIELDS", "parse_upstream_settings"]

UPSTREAM_FIELDS = {
    "circuit_breaker",
    "retry_budget",
    "share_retry_after",
    "max_cool_down",
    "rate_limit",
}

# (field, parser, what the error says is expected). The field is also the
# config's attribute, so a bound the core refuses names the same field.
_Scalar = tuple[str, Callable[[str], Any], str]
_DURATION = "a duration such as 30s"
_LEVELS = "one of " + ", ".join(level.name for level in Criticality)


def _criticality(text: str) -> Criticality:
    try:
        return Criticality[text]
    except KeyError:
        raise Malformed from None


_BREAKER: tuple[_Scalar, ...] = (
    ("enabled", boolean, "true or false"),
    ("failure_ratio", number, "a number"),
    ("minimum_calls", integer, "an integer"),
    ("window", parse_duration, _DURATION),
    ("buckets", integer, "an integer"),
    ("open_for", parse_duration, _DURATION),
    ("half_open_probes", integer, "an integer"),
    ("close_ratio", number, "a number"),
    ("count_throttling", boolean, "true or false"),
)
_RATE_LIMIT: tuple[_Scalar, ...] = (
    ("rate", number, "a number"),
    ("burst", integer, "an integer"),
    ("token_rate", number, "a number"),
    ("token_burst", number, "a number"),
    ("learn", boolean, "true or false"),
    ("quiet", parse_duration, _DURATION),
    ("max_queue_delay", parse_duration, _DURATION),
    ("concurrency", boolean, "true or false"),
    ("max_in_flight", integer, "an integer"),
    ("criticality", _criticality, _LEVELS),
)
_BudgetType = type[RatioBudgetConfig] | type[TokenBucketConfig]
_BUDGETS: dict[str, tuple[_BudgetType, tuple[_Scalar, ...]]] = {
    "ratio": (
        RatioBudgetConfig,
        (
            ("ratio", number, "a number"),
            ("min_per_second", integer, "an integer"),
            ("ttl", parse_duration, _DURATION),
        ),
    ),
    "token_bucket": (
        TokenBucketConfig,
        (("max_tokens", number, "a number"), ("token_ratio", number, "a number")),
    ),
}
_BUDGET_FIELDS = {"kind"} | {name for _, rows in _BUDGETS.values() for name, _, _ in rows}

C = TypeVar("C", bound=BreakerConfig | RatioBudgetConfig | TokenBucketConfig | RateLimitConfig)


def _apply(
    base: C,
    node: yaml.Node,
    fields: Mapping[str, yaml.Node],
    path: str,
    rows: tuple[_Scalar, ...],
) -> C:
    updates = {
        name: scalar(fields[name], f"{path}.{name}", parse, what)
        for name, parse, what in rows
        if name in fields
    }
    try:
        return replace(base, **updates)
    except PolicyInputError as exc:
        at = fields.get(exc.field, node)
        raise ConfigError(f"{where(at, f'{path}.{exc.field}')}: {exc.message}") from None


def _breaker(node: yaml.Node, path: str, base: BreakerConfig) -> BreakerConfig:
    fields = mapping(node, path, {name for name, _, _ in _BREAKER})
    return _apply(base, node, fields, path, _BREAKER)


def _rate_limit(node: yaml.Node, path: str, base: RateLimitConfig) -> RateLimitConfig:
    fields = mapping(node, path, {name for name, _, _ in _RATE_LIMIT})
    return _apply(base, node, fields, path, _RATE_LIMIT)


def _budget(node: yaml.Node, path: str, base: RetryBudgetConfig) -> RetryBudgetConfig:
    fields = mapping(node, path, _BUDGET_FIELDS)
    kind = base.kind
    if "kind" in fields:
        kind = scalar(fields["kind"], f"{path}.kind", str, "ratio or token_bucket")
        if kind not in _BUDGETS:
            raise ConfigError(
                f"{where(fields['kind'], f'{path}.kind')}: "
                f"expected ratio or token_bucket, got {quoted(kind)}{did_you_mean(kind, _BUDGETS)}"
            )
    config_type, rows = _BUDGETS[kind]
    allowed = {name for name, _, _ in rows}
    for name, value in fields.items():
        if name != "kind" and name not in allowed:
            raise ConfigError(
                f"{where(value, f'{path}.{shown_name(name)}')}: not a field of kind {kind}"
                f"{did_you_mean(name, allowed)}; expected one of "
                + ", ".join(sorted(allowed | {"kind"}))
            )
    start: RetryBudgetConfig = base if isinstance(base, config_type) else config_type()
    return _apply(start, node, fields, path, rows)


def _settings(fields: Mapping[str, yaml.Node], path: str, base: UpstreamConfig) -> UpstreamConfig:
    updates: dict[str, Any] = {}
    if "circuit_breaker" in fields:
        updates["circuit_breaker"] = _breaker(
            fields["circuit_breaker"], f"{path}.circuit_breaker", base.circuit_breaker
        )
    if "retry_budget" in fields:
        updates["retry_budget"] = _budget(
            fields["retry_budget"], f"{path}.retry_budget", base.retry_budget
        )
    if "rate_limit" in fields:
        updates["rate_limit"] = _rate_limit(
            fields["rate_limit"], f"{path}.rate_limit", base.rate_limit
        )
    if "share_retry_after" in fields:
        updates["share_retry_after"] = scalar(
            fields["share_retry_after"], f"{path}.share_retry_after", boolean, "true or false"
        )
    if "max_cool_down" in fields:
        updates["max_cool_down"] = scalar(
            fields["max_cool_down"], f"{path}.max_cool_down", parse_duration, _DURATION
        )
    try:
        return replace(base, **updates) if updates else base
    except PolicyInputError as exc:
        at = where(fields[exc.field], f"{path}.{exc.field}")
        raise ConfigError(f"{at}: {exc.message}") from None


def parse_upstream_settings(
    fields: Mapping[str, yaml.Node], path: str, profile: Profile
) -> Profile:
    """`profile` with the profile's own upstream settings, then its `upstreams:`."""
    own = _settings(fields, path, profile.for_upstream(""))
    if UPSTREAM_FIELDS & fields.keys():
        profile = replace(
            profile,
            circuit_breaker=own.circuit_breaker,
            retry_budget=own.retry_budget,
            share_retry_after=own.share_retry_after,
            max_cool_down=own.max_cool_down,
            rate_limit=own.rate_limit,
        )
    if "upstreams" not in fields:
        return profile
    overrides = {}
    for name, node in mapping(fields["upstreams"], f"{path}.upstreams", set()).items():
        at = f"{path}.upstreams.{name}"
        if len(name) > MAX_NAME_CHARS:
            raise ConfigError(
                f"{where(node, at[:80] + '...')}: an upstream name is at most "
                f"{MAX_NAME_CHARS} characters, so no request could name this one"
            )
        overrides[name] = _settings(mapping(node, at, UPSTREAM_FIELDS), at, own)
    return replace(profile, upstreams=MappingProxyType(overrides))
