"""tests/vectors/leases.json through the Python client's spare permits
(squawk_client._leases.Leases), on a fake clock. The Go and TypeScript
clients run the same file."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squawk_client._leases import Leases

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "vectors" / "leases.json").read_text()
)["cases"]
KEY = ("default", "api.example", "")


def _ms(value: float | None) -> timedelta:
    return timedelta(milliseconds=value or 0)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_lease_vector(case: dict[str, Any]) -> None:
    now = [0.0]
    leases = Leases(clock=lambda: now[0])
    for event in case["events"]:
        now[0] = event["at"] / 1000
        if "grant" in event:
            g = event["grant"]
            lease = _ms(g["leaseMs"]) if "leaseMs" in g else None
            leases.granted(
                KEY,
                g["permits"],
                lease,
                g["admissionId"],
                _ms(g.get("waitMs")),
                _ms(g.get("spacingMs")),
            )
        elif "revoke" in event:
            leases.revoke(KEY)
        else:
            deadline = event["take"].get("deadlineMs")
            got = leases.take(KEY, None if deadline is None else deadline / 1000)
            expect = event["expect"]
            if expect is None:
                assert got is None, event
            else:
                assert got is not None, event
                admission_id, wait, _ = got
                assert admission_id == expect["admissionId"]
                assert wait * 1000 == pytest.approx(expect["waitMs"], abs=1e-6), event
