"""A pod executor in Python: each worker thread runs steps through
`run_step_sync` against the test's fake upstream, one real HTTP call per
dispatch, and prints what happened as JSON lines (tests/e2e/test_pod.py reads
them; the Go and Node executors print the same lines).

    python py_executor.py '{"target": ..., "base": ..., "upstream": ..., ...}'
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from squawk_client import (
    Action,
    ErrorInfo,
    SquawkClient,
    StepError,
    StepFailed,
    StepOptions,
    Tier,
    run_step_sync,
)

_print_lock = threading.Lock()


def emit(worker: str, event: str, **fields: Any) -> None:
    with _print_lock:
        print(json.dumps({"w": worker, "ev": event, **fields}), flush=True)


def http_get(base: str, path: str, worker: str) -> tuple[int, dict[str, str], bytes]:
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        conn.request("GET", path, headers={"X-Pod-Worker": worker})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def work(client: SquawkClient, config: dict[str, Any], worker: str, ok: list[bool]) -> None:
    base, path = config["base"], config["path"]
    status, _, _ = http_get(base, path + "/gate", worker)
    if status != 200:
        emit(worker, "error", message=f"the gate answered {status}")
        ok.append(False)
        return
    retry_pending = False

    def step(_: None) -> bool:
        status, headers, body = http_get(base, path, worker)
        emit(worker, "dispatch", status=status)
        if status >= 400:
            raise StepError(f"HTTP {status}", http_status=status, body=body, headers=headers)
        return headers.get("X-Pod-Stop") == "1"

    def on_error(info: ErrorInfo) -> Tier:
        nonlocal retry_pending
        d = info.decision
        retry_pending = d.action is Action.RETRY
        emit(
            worker,
            "decision",
            action=f"ACTION_{d.action.name}",
            reason=f"REASON_{d.reason.name}",
            delay_ms=round(d.delay.total_seconds() * 1000),
        )
        return Tier.DEFAULT

    def sleep(seconds: float) -> None:
        # The runner sleeps after a RETRY decision, or after a refused Admit.
        nonlocal retry_pending
        kind = "retry" if retry_pending else "admission"
        retry_pending = False
        emit(worker, "wait", kind=kind, ms=round(seconds * 1000))
        time.sleep(seconds)

    options = StepOptions(
        upstream=config["upstream"],
        capability=worker,
        profile=config["profile"],
        max_attempts=config["max_attempts"],
    )
    ends = time.monotonic() + config["time_limit_s"]
    for _ in range(config["max_steps"]):
        if time.monotonic() > ends:
            emit(worker, "error", message="time limit reached")
            ok.append(False)
            return
        try:
            stop = run_step_sync(
                client, step, None, on_error=on_error, options=options, sleep=sleep
            )
        except StepFailed as failed:
            d = failed.decision
            emit(
                worker,
                "step",
                ok=False,
                action=f"ACTION_{d.action.name}",
                reason=f"REASON_{d.reason.name}",
                calls=failed.attempts,
            )
            continue
        emit(worker, "step", ok=True)
        if stop:
            break
    emit(worker, "done")
    ok.append(True)


def main() -> int:
    config = json.loads(sys.argv[1])
    # A generous call timeout: the test counts what the daemon decided, so
    # no answer may come from the client's fallback on a busy machine.
    with SquawkClient(config["target"], call_timeout=timedelta(seconds=5)) as client:
        client.get_upstreams()  # connect before the gate opens
        ok: list[bool] = []
        threads = [
            threading.Thread(target=work, args=(client, config, w, ok)) for w in config["workers"]
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        emit("", "exit", fallbacks=client.fallback_count)
    return 0 if ok == [True] * len(threads) else 1


if __name__ == "__main__":
    sys.exit(main())
