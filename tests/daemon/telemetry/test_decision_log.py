"""The decision log stays one JSON object per line for every reader.

JSON with `ensure_ascii=False` escapes the C0 controls, but leaves U+0085
(NEL), U+2028 and U+2029 raw, and a reader that splits lines as Python's
`str.splitlines()` does (or JavaScript's line terminators, for U+2028 and
U+2029) sees a line break in each: a caller's capability name could then
start a forged line of its own.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import grpc

from conftest import start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

# Every character str.splitlines() breaks on.
BREAKS = ("\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
FORGED = '{"rpc": "DecideRetry", "squawk.action": "RETRY", "forged": true}'


def test_no_character_in_a_callers_name_splits_a_decision_log_line(tmp_path: Path) -> None:
    log_path = tmp_path / "decisions.jsonl"
    names = [f"search{brk}{FORGED}" for brk in BREAKS]
    daemon = start_daemon("--decision-log", str(log_path))
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for name in names:
                stub.DecideRetry(
                    pb.DecideRetryRequest(attempt=1, http_status=503, capability=name), timeout=5
                )
            batch = [pb.DecideRetryRequest(attempt=1, http_status=503, capability=n) for n in names]
            stub.DecideRetryBatch(pb.DecideRetryBatchRequest(requests=batch), timeout=5)
    finally:
        daemon.stop()
    text = log_path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) == 2 * len(names)
    decoded = [json.loads(line) for line in lines]
    # The name is kept, escaped, and reads back whole.
    assert [d["squawk.capability"] for d in decoded] == names + names
    assert not any("forged" in d for d in decoded)


# Every control character (Unicode's Cc: C0, DEL and C1) but the line breaks above.
CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0)) if chr(c) not in BREAKS]


def test_no_control_character_in_a_callers_name_reaches_the_log_raw(tmp_path: Path) -> None:
    log_path = tmp_path / "decisions.jsonl"
    # DEL first, alone: an ASCII-only line is the common case.
    names = ["a\x7fb", "upstream" + "".join(CONTROLS)]
    daemon = start_daemon("--decision-log", str(log_path))
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for name in names:
                stub.DecideRetry(
                    pb.DecideRetryRequest(attempt=1, http_status=503, upstream=name), timeout=5
                )
                stub.Admit(pb.AdmitRequest(upstream=name), timeout=5)
    finally:
        daemon.stop()
    text = log_path.read_text(encoding="utf-8")
    assert not [c for c in text if c != "\n" and unicodedata.category(c) == "Cc"]
    # Escaped as JSON escapes the C0 ones, so every name reads back whole.
    assert "a\\u007fb" in text
    assert [json.loads(line)["squawk.upstream"] for line in text.splitlines()] == [
        name for name in names for _ in ("DecideRetry", "Admit")
    ]
