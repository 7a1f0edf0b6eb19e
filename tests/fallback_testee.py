"""The Python testee of the fallback conformance runner
(tests/test_fallback_conformance.py): one case per line on stdin,

    {"name": ..., "now": <Unix seconds>, "env": {...}, "request": <DecideRetryRequest JSON>}

one answer per line on stdout: {"name", "response"} (proto3 JSON),
{"name", "error": {"field"}} for a refused input, or {"name", "crash"}. It
decides through the Python client's own fallback (the policy core): the
profile from the case's environment, the clock at the case's instant.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from google.protobuf import json_format

from squawk.v1 import policy_pb2 as pb
from squawk_client import SquawkInputError
from squawk_client._decision import fallback_decision, fallback_profile


def answer(line: str) -> dict[str, Any]:
    try:
        case = json.loads(line)
    except ValueError as bad:
        return {"crash": f"not a case: {bad}"}
    out: dict[str, Any] = {"name": case.get("name")}
    try:
        request = json_format.ParseDict(case["request"], pb.DecideRetryRequest())
        now = float(case.get("now", 0))
        decision = fallback_decision(request, fallback_profile(case.get("env", {})), lambda: now)
    except SquawkInputError as bad:
        out["error"] = {"field": bad.field}
        return out
    except Exception as bad:
        out["crash"] = f"{type(bad).__name__}: {bad}"
        return out
    message = pb.DecideRetryResponse(
        action=pb.Action.ValueType(decision.action.value),
        reason=pb.Reason.ValueType(decision.reason.value),
        explanation=decision.explanation,
        consumes_attempt=decision.consumes_attempt,
        classification=decision.classification,
    )
    message.delay.FromTimedelta(decision.delay)
    if decision.retry_after is not None:
        message.retry_after.FromTimedelta(decision.retry_after)
    out["response"] = json_format.MessageToDict(message)
    return out


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(answer(line)), flush=True)


if __name__ == "__main__":
    main()
