"""An executor step in Python: search hotels, with Squawk deciding the retries.

    .venv/bin/python examples/python/executor.py PARIS

The daemon's address is read from SQUAWK_ADDRESS (default 127.0.0.1:50051),
the API's from UPSTREAM_URL (default http://127.0.0.1:8080/search).

The step is one HTTP call. `run_step_sync` runs it and, after each failure,
asks the daemon what to do (DecideRetry): resend after a delay (a 503),
correct the parameters (a 400), or stop. With `upstream` set it also asks
the pod before each call (Admit) and reports each success (ReportOutcome),
so every executor of the pod shares one breaker, retry budget and pace for
the hotel API. When the daemon cannot be reached, the client decides
alone, from the same rules (the local fallback); only corrections need it.

Prints what the correction changed and the hotels found, or why the step
failed (exit status 1). See examples/README.md.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta
from typing import Any

from google.protobuf import json_format

from squawk_client import (
    AnalyzeErrorRequest,
    SquawkClient,
    StepError,
    StepFailed,
    StepOptions,
    run_step_sync,
)

Params = dict[str, Any]

# The capability's input schema, as the executor already knows it (a tool
# schema). AnalyzeError suggests only values that satisfy it.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city_code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "nights": {"type": "integer", "minimum": 1},
    },
    "required": ["city_code"],
}


class NoSafeCorrection(Exception):
    """The daemon found nothing it could safely change: resending would fail again."""


URL = os.environ.get("UPSTREAM_URL", "http://127.0.0.1:8080/search")
TARGET = os.environ.get("SQUAWK_ADDRESS", "127.0.0.1:50051")


def search_hotels(params: Params) -> Any:
    """The step: one call to the upstream. A failed HTTP answer is raised as a
    StepError carrying its status, body and headers (Retry-After), which the
    policy reads; any other exception counts as a transport failure."""
    query = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{URL}?{query}", timeout=10) as reply:
            return json.load(reply)
    except urllib.error.HTTPError as failed:
        with failed:
            body = failed.read()
        raise StepError(
            f"HTTP {failed.code}", http_status=failed.code, body=body, headers=dict(failed.headers)
        ) from None


def corrected(squawk: SquawkClient, params: Params, error: BaseException) -> Params:
    """The correction hook's work, when the policy answers CORRECT (a 4xx that
    fixed parameters may cure): ask AnalyzeError for a fix and merge its
    suggested_changes (only the changed keys) into the parameters."""
    if not isinstance(error, StepError):
        raise error  # CORRECT follows an HTTP answer: not reached
    request = AnalyzeErrorRequest(
        http_status=error.http_status,
        error_response=error.body.decode(errors="replace"),
        capability_name="search_hotels",
    )
    request.original_request.update(params)
    request.parameter_schema.update(SCHEMA)
    answer = squawk.analyze_error(request)
    if not answer.should_retry:
        # The runner passes a hook's exception on to its caller unchanged.
        raise NoSafeCorrection(answer.reason)
    changes = json_format.MessageToDict(answer.suggested_changes)
    print(f"correction: {json.dumps(changes)} ({answer.reason})")
    return {**params, **changes}


def main() -> int:
    city = sys.argv[1] if len(sys.argv) > 1 else "PARIS"
    # The daemon is a sidecar on loopback: it answers in about a millisecond.
    # A call it has not answered in call_timeout (50 ms by default) is decided
    # by the local fallback instead, so a wedged daemon never stalls a step;
    # 1 s here, so that a first call on a busy machine still reaches it.
    # Close the client before exiting: it sends the outcomes still queued.
    with SquawkClient(TARGET, call_timeout=timedelta(seconds=1)) as squawk:
        try:
            found = run_step_sync(
                squawk,
                search_hotels,
                {"city_code": city, "nights": 2},
                correct=lambda params, error, _decision: corrected(squawk, params, error),
                options=StepOptions(
                    capability="search_hotels",
                    upstream="hotel-api",
                    deadline=timedelta(seconds=30),
                ),
            )
        except StepFailed as failed:
            # The policy ended the step: `decision` says why, `__cause__` is
            # the step's last error.
            d = failed.decision
            print(
                f"step failed: StepFailed: REASON_{d.reason.name} after "
                f"{failed.attempts} calls: {d.explanation} (last error: {failed.__cause__})"
            )
            return 1
        except NoSafeCorrection as stuck:
            print(f"step stopped: {stuck}")
            return 1
    names = ", ".join(hotel["name"] for hotel in found["hotels"])
    print(f"{len(found['hotels'])} hotels in {found['city_code']}: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
