"""Request bodies as grpc hands them over: parsed, malformed, or large.

grpc calls a method's deserializer on the event loop, in one go: a 4 MB
batch took 10-30 ms to parse there, before any handler could slice its
work, and eight of them arriving together held health checks for longer
than that. So a body over MAX_PARSE_NOW bytes is handed over unparsed, and
the boundary parses it in turns (turns.py), CHUNK bytes at a time: the body
is cut between two of its top-level fields, and protobuf reads a message
cut there and merged piece by piece exactly as it reads it whole.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import Message

from .turns import Turns

__all__ = ["CHUNK", "MAX_PARSE_NOW", "Malformed", "Unparsed", "reader"]

# Bodies up to this size are parsed by grpc's call (well under a millisecond).
MAX_PARSE_NOW = 64 << 10
# The bytes parsed between two pauses: about 0.3 ms of work.
CHUNK = 32 << 10
# ... or this many top-level fields, whichever comes first.
_CHUNK_FIELDS = 512
# Top-level fields walked to find the cuts; past them, the rest is parsed in
# one go. A batch of MAX_BATCH items has that many fields; a body of
# millions of tiny fields (refused anyway) would cost more to walk in Python
# than protobuf takes to parse it.
_MAX_FIELDS = 16_384


class Malformed:
    """A request body that did not parse as its method's message.

    The deserializer returns this instead of raising: grpc answers a raising
    deserializer with UNKNOWN and logs a traceback per call, which lets a
    stream of garbage flood the log.
    """

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


class Unparsed:
    """A body too large to parse on grpc's call: parse() reads it in turns."""

    __slots__ = ("_cls", "_data")

    def __init__(self, cls: type[Message], data: bytes) -> None:
        self._cls = cls
        self._data = data

    async def parse(self, turns: Turns) -> Message | Malformed:
        data = self._data
        message = self._cls()
        start = 0
        fields = 0
        try:
            async with turns.turn() as turn:
                while start < len(data):
                    end, cut = start, fields + _CHUNK_FIELDS
                    while end - start < CHUNK and end < len(data) and fields < cut:
                        fields += 1
                        end = _field_end(data, end) if fields <= _MAX_FIELDS else len(data)
                    message.MergeFromString(data[start:end])
                    start = end
                    await turn.pause()
        except Exception:  # DecodeError, or protobuf's recursion limit
            return Malformed(self._cls.DESCRIPTOR.full_name)
        return message


def reader(cls: type[Message]) -> Callable[[bytes], Message | Malformed | Unparsed]:
    """A method's deserializer: never raises, parses at most MAX_PARSE_NOW bytes."""
    parse = cls.FromString
    name = cls.DESCRIPTOR.full_name

    def read(data: bytes) -> Message | Malformed | Unparsed:
        if len(data) > MAX_PARSE_NOW:
            return Unparsed(cls, data)
        try:
            return parse(data)
        except Exception:  # DecodeError, or protobuf's recursion limit
            return Malformed(name)

    return read


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while shift < 64:
        byte = data[pos]  # IndexError past the end
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("varint too long")


def _field_end(data: bytes, pos: int) -> int:
    """Where the top-level field starting at `pos` ends; the end of the body
    when it cannot tell, so that the rest is parsed in one go and protobuf
    says what is wrong with it. A group (wire types 3 and 4, which no
    squawk.v1 message has) is one of those: its end is only found by
    walking all it holds."""
    try:
        tag, pos = _varint(data, pos)
        wire = tag & 7
        if wire == 0:
            pos = _varint(data, pos)[1]
        elif wire == 1:
            pos += 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            pos += size
        elif wire == 5:
            pos += 4
        else:
            return len(data)
    except (IndexError, ValueError):
        return len(data)
    return min(pos, len(data))
