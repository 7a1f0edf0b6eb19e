"""A model's answer is hostile input: bombs, depth, odd numbers and planted credentials.

Every answer comes from a real HTTP server on loopback (see chat_server):
the daemon's httpx client reads it as it would in production.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from chat_server import ChatServer, Reply, analyze, answer, completion, settings_for
from conftest import start_daemon
from squawk.daemon.analysis import AnalysisRequest, Source
from squawk.daemon.analysis.analyzer import MAX_REJECTED
from squawk.daemon.analysis.llm import ACCEPT_ENCODING, MAX_RESPONSE_BYTES
from squawk.daemon.analysis.prompt import MAX_ANSWER_CHARS
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

SCHEMA: dict[str, Any] = {
    "properties": {
        "city_code": {"type": "string", "enum": ["PAR", "LON", "NYC"]},
        "api_key": {"type": "string"},
        "note": {"type": "string"},
        "filters": {"type": "object"},
    }
}
# The offline analyzer fixes PARIS -> PAR by itself, so every fallback is
# visible: source HEURISTIC, and why in model_fallback. api_key is not
# protected: nothing but the credential gate stands between it and a model.
REQUEST = AnalysisRequest(
    http_status=400,
    error_response="error 400: INVALID CITY CODE: PARIS",
    original_request={"city_code": "PARIS", "api_key": "sk-live-ownkey-12345678", "note": "x"},
    parameter_schema=SCHEMA,
)
ATTACKER = "sk-ATTACKERcanary-000000000000"


def _gzip_bomb(inflated: int) -> bytes:
    """A valid gzip stream of `inflated` zero bytes, built without holding them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(1 << 20)
    parts = [packer.compress(chunk) for _ in range(inflated >> 20)]
    return b"".join([*parts, packer.flush()])


def test_a_gzip_bomb_is_cut_at_the_cap_without_inflating_it() -> None:
    bomb = _gzip_bomb(256 << 20)
    assert len(bomb) < 512 << 10  # about 256 KB on the wire
    reply = Reply(bomb, headers={"Content-Encoding": "gzip"})
    tracemalloc.start()
    try:
        with ChatServer(reply) as server:
            (result,) = analyze(settings_for(server), REQUEST)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # httpx inflated the whole body first: 256 MB per call. Now at most
    # the cap is ever held, plus the bomb itself as it arrives.
    assert peak < 4 * MAX_RESPONSE_BYTES + 2 * len(bomb), f"peak {peak >> 20} MiB"
    assert result.source is Source.HEURISTIC and result.model_fallback == "bad_response"
    assert server.seen[0].headers["Accept-Encoding"] == ACCEPT_ENCODING == "gzip, identity"


def test_a_gzip_answer_within_the_cap_is_read() -> None:
    body = json.dumps(completion(json.dumps({"changes": {"city_code": "LON"}}))).encode()
    with ChatServer(Reply(gzip.compress(body), headers={"Content-Encoding": "gzip"})) as server:
        (result,) = analyze(settings_for(server), REQUEST)
    assert result.source is Source.LLM and result.suggested_changes == {"city_code": "LON"}


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("br", b"\x8b\x02\x80{}\x03"),  # an encoding it did not ask for
        ("deflate", zlib.compress(b"{}")),  # nor this one
        ("gzip", gzip.compress(b"{}")[:-6]),  # truncated
        ("gzip", b"not gzip at all"),
        ("gzip, gzip", gzip.compress(gzip.compress(b"{}"))),  # stacked: never capped twice
    ],
)
def test_an_encoding_it_cannot_cap_is_refused(encoding: str, body: bytes) -> None:
    with ChatServer(Reply(body, headers={"Content-Encoding": encoding})) as server:
        (result,) = analyze(settings_for(server), REQUEST)
    assert result.source is Source.HEURISTIC and result.model_fallback == "bad_response"
    assert len(server.seen) == 1  # a bad answer is not asked again


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


# (an answer's content, why it is not read)
UNREADABLE = [
    ('{"changes": ' + _deep(100_000) + "}", "nested 100,000 levels"),
    ('{"changes": {"city_code": ' + _deep(40) + "}}", "nested past the bound"),
    ('{"changes": {"city_code": 1e999}}', "a number no double holds"),
    ('{"changes": {"city_code": ' + "9" * 400 + "}}", "an integer no double holds"),
    ('{"changes": {"city_code": "\\ud800"}}', "a lone surrogate"),
    ('{"changes": {"\\udfff": "PAR"}}', "a lone surrogate as a key"),
    ('{"changes": {"city_code": "LON"}, "pad": "' + "x" * MAX_ANSWER_CHARS + '"}', "too long"),
    ("```" + " " * 200_000 + "x", "a fence a regex would backtrack on"),
]


@pytest.mark.parametrize(("content", "why"), UNREADABLE, ids=[w for _, w in UNREADABLE])
def test_an_unreadable_answer_falls_back(content: str, why: str) -> None:
    with ChatServer(Reply(completion(content))) as server:
        (result,) = analyze(settings_for(server), REQUEST)
    assert result.source is Source.HEURISTIC, why
    assert result.suggested_changes == {"city_code": "PAR"}
    assert result.model_fallback == "unparsable"


def test_a_deep_envelope_falls_back() -> None:
    with ChatServer(Reply('{"choices": ' + _deep(100_000) + "}")) as server:
        (result,) = analyze(settings_for(server), REQUEST)
    assert result.source is Source.HEURISTIC and result.model_fallback == "bad_response"


def test_a_model_cannot_replace_a_credential() -> None:
    planted = {"api_key": ATTACKER, "city_code": "PAR"}
    with ChatServer(answer(planted)) as server:
        (result,) = analyze(settings_for(server), REQUEST)
    assert result.source is Source.LLM and result.suggested_changes == {"city_code": "PAR"}
    (refused,) = result.rejected_changes
    assert refused.parameter == "api_key"
    assert refused.reason.startswith(
        "credential change refused: api_key is named like a credential"
    )
    assert refused.proposed_value == "[REDACTED]"
    assert "a change to a credential was refused (api_key)" in result.reason
    assert ATTACKER not in repr(result)


# (a change, why it touches a credential)
PLANTED: list[tuple[dict[str, Any], str]] = [
    ({"note": f"use {ATTACKER}"}, "the proposed value holds a value shaped like a secret"),
    ({"note": "Bearer abcdefgh12345678"}, "the proposed value holds a value shaped like a secret"),
    (
        {"filters": {"password": "hunter2"}},
        "the proposed value holds a key named like a credential",
    ),
    (
        {"filters": {"a": [{"b": ATTACKER}]}},
        "the proposed value holds a value shaped like a secret",
    ),
    ({"filters": {ATTACKER: 1}}, "the proposed value holds a key shaped like a secret"),
]


@pytest.mark.parametrize(("changes", "why"), PLANTED, ids=[w[22:] for _, w in PLANTED])
def test_a_secret_planted_anywhere_in_a_value_is_refused(changes: dict[str, Any], why: str) -> None:
    with ChatServer(answer(changes)) as server:
        (result,) = analyze(settings_for(server), REQUEST)
    assert result.source is Source.HEURISTIC  # the model's change was refused: offline fix
    (refused,) = result.rejected_changes
    assert refused.reason.startswith(f"credential change refused: {why}")
    assert ATTACKER not in repr(result) and "hunter2" not in repr(result)
    assert "abcdefgh12345678" not in repr(result)


def test_hostile_answers_over_the_wire() -> None:
    """The daemon answers each one, never INTERNAL, and echoes no planted secret."""
    answers = [
        Reply(completion('{"changes": ' + _deep(100_000) + "}")),
        Reply(completion('{"changes": {"note": "\\ud800"}}')),
        Reply(completion('{"changes": {"note": "' + "9" * 400 + '"}}')),
        answer({"api_key": ATTACKER, "city_code": "LON"}),
        Reply(_gzip_bomb(64 << 20), headers={"Content-Encoding": "gzip"}),
    ]
    with ChatServer(*answers) as server:
        daemon = start_daemon(env=server.daemon_env())
        replies = []
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = pb_grpc.PolicyServiceStub(channel)
                for i in range(len(answers)):
                    request = pb.AnalyzeErrorRequest(
                        http_status=400,
                        error_response="error 400: INVALID CITY CODE: PARIS",
                        user_query=f"call {i}",  # no cached answer
                    )
                    request.original_request.update(dict(REQUEST.original_request))
                    request.parameter_schema.update(SCHEMA)
                    replies.append(stub.AnalyzeError(request, timeout=20))
        finally:
            output = daemon.output()
            daemon.stop()
    assert len(server.seen) == len(answers)
    sources = [r.source for r in replies]
    assert sources == [pb.ANALYSIS_SOURCE_HEURISTIC] * 3 + [
        pb.ANALYSIS_SOURCE_LLM,
        pb.ANALYSIS_SOURCE_HEURISTIC,
    ]
    planted = replies[3]
    assert json_format.MessageToDict(planted.suggested_changes) == {"city_code": "LON"}
    assert [(r.parameter, r.proposed_value.string_value) for r in planted.rejected_changes] == [
        ("api_key", "[REDACTED]")
    ]
    for reply in replies:
        assert ATTACKER not in str(reply)
    assert ATTACKER not in output and "Traceback" not in output


def test_refusals_are_listed_up_to_the_limit_and_counted_beyond() -> None:
    changes: dict[str, Any] = {"note": "z" * 20_000}
    changes |= {f"invented_{i}": i for i in range(100)}
    with ChatServer(answer(changes)) as server:
        (result,) = analyze(settings_for(server), REQUEST)
    assert len(result.rejected_changes) == MAX_REJECTED
    assert f"{len(changes) - MAX_REJECTED} more refused changes are not listed" in result.reason
    oversized = result.rejected_changes[0]
    assert oversized.reason.startswith("too large")
    assert oversized.proposed_value == "(not shown: 20002 characters of JSON)"
