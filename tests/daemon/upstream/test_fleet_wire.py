"""The fleet script's wire (fleet_wire.py): each request's words in the
order every release sends them, the reply read by name, and the script
declaring the same names the codec writes. Pure: no Redis."""

from __future__ import annotations

import re

import pytest

from squawk.daemon.server.tracking import fleet_wire as wire
from squawk.policy import BreakerState
from squawk.policy.fleet import Reading

SETTINGS = "60000 10 60000 30000 3 60000 0 100 0123456789ab"


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (
            wire.SyncRequest("pod-a", 4, 10, 2, 8, 1, 0, 0, -1, 1, 0, 12.3456),
            f"sync pod-a 4 10 2 8 1 0 0 -1 1 0 12.346 {SETTINGS}",
        ),
        (wire.MoveRequest("pod-a", 7, 2), f"move pod-a 7 2 {SETTINGS}"),
        (wire.KeepRequest("pod-a", 7, 1500, 0), f"keep pod-a 7 1500 0 {SETTINGS}"),
    ],
)
def test_a_request_is_the_words_of_every_release(request_: wire.Request, words: str) -> None:
    assert wire.encode(request_, SETTINGS) == words


def test_the_script_reads_the_fields_the_codec_writes() -> None:
    declared = dict(re.findall(r"^  (\w+) = \{(.*)\},$", wire.SCRIPT, re.MULTILINE))
    for kind, op in ((wire.SyncRequest, "sync"), (wire.MoveRequest, "move")):
        names = ("op", *kind._fields, *wire.Settings._fields)
        assert declared[op] == ", ".join(f"'{n}'" for n in names)
    reply = re.search(r"^local REPLY = \{(.*)\}$", wire.SCRIPT, re.MULTILINE)
    assert reply is not None
    assert reply.group(1) == ", ".join(f"'{n}'" for n in Reading._fields)
    # fleet.lua itself reads no word and writes no number by position.
    assert not re.search(r"arg\[\d", wire.SCRIPT)


def test_a_reply_is_read_by_name_in_seconds_and_bounded() -> None:
    raw = [2, 5, 1500, 10, 12, 2, 0, 0, 0, 0, 3, 8, 1, 250, 2000, 4500, 3, 1, 1500, 9]
    got = wire.reading(raw)
    assert got is not None
    assert got.state is BreakerState.OPEN
    assert (got.left, got.cooling, got.demand, got.own) == (1.5, 2.0, 4.5, 1.5)
    # Never more failures than calls; `differ` a flag.
    assert (got.calls, got.failures, got.differ, got.born) == (10, 10, True, 9)


@pytest.mark.parametrize(
    "raw",
    [None, [1] * 19, [1] * 21, [4] + [0] * 19, [1, "x"] + [0] * 18, [True] + [0] * 19],
)
def test_a_reply_of_another_shape_is_none(raw: object) -> None:
    assert wire.reading(raw) is None
