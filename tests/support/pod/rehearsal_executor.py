"""The pod rehearsal's executor (tests/e2e/test_pod_rehearsal.py): asks the
daemon on its unix socket, through the Python client, what to do after a
503 at attempt 3, every 20 ms, until its stdin closes; one JSON line per
answer: {"t": seconds since start, "action", "delay_ms", "fallback"}."""

from __future__ import annotations

import json
import sys
import threading
import time

from squawk.v1 import policy_pb2 as pb
from squawk_client import SquawkClient


def main(target: str) -> None:
    done = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    client = SquawkClient(target)
    start = time.monotonic()
    request = pb.DecideRetryRequest(attempt=3, http_status=503)
    while not done.is_set():
        decision = client.decide_retry(request)
        line = {
            "t": round(time.monotonic() - start, 3),
            "action": int(decision.action),
            "delay_ms": round(decision.delay.total_seconds() * 1000),
            "fallback": decision.fallback,
        }
        print(json.dumps(line), flush=True)
        time.sleep(0.02)


if __name__ == "__main__":
    main(sys.argv[1])
