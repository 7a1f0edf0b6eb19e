"""The protobuf wire format by hand, and the byte-level damage the fuzz does.

The generated classes only write well-formed messages with valid UTF-8, so
everything a hostile or broken peer can send that they refuse to write
(invalid UTF-8, wrong wire types, lying lengths, overlong varints, field
number 0) is spelled out here, from the encoding spec
(protobuf.dev/programming-guides/encoding).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

__all__ = ["MUTATIONS", "field_bytes", "field_varint", "mutate", "struct_bytes", "tag", "varint"]

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5
MAX_FIELD = 2**29 - 1

# Strings protobuf must refuse in a `string` field: a lone surrogate as
# CESU-8, an overlong NUL, a stray continuation byte, a truncated sequence.
BAD_UTF8 = (b"\xed\xa0\x80", b"a\xed\xbf\xbfb", b"\xc0\x80", b"\x80", b"\xff\xfe", b"\xe2\x82")


def varint(n: int) -> bytes:
    """Base-128 varint; a negative number is its 64-bit two's complement, as for int32."""
    if 0 <= n < 128:
        return _ONE_BYTE[n]
    n &= (1 << 64) - 1
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_ONE_BYTE = [bytes((n,)) for n in range(128)]


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def field_varint(field: int, n: int) -> bytes:
    return tag(field, VARINT) + varint(n)


def field_bytes(field: int, data: bytes) -> bytes:
    return tag(field, LEN) + varint(len(data)) + data


def struct_bytes(value: Mapping[str, Any]) -> bytes:
    """A google.protobuf.Struct, NaN and infinities included, written directly:
    several times faster than Struct.update for the wide values the fuzz sends."""
    return b"".join(
        field_bytes(1, field_bytes(1, key.encode()) + field_bytes(2, _value_bytes(item)))
        for key, item in value.items()
    )


def _value_bytes(value: Any) -> bytes:
    if value is None:
        return field_varint(1, 0)
    if isinstance(value, bool):
        return field_varint(4, int(value))
    if isinstance(value, int | float):
        return tag(2, I64) + _DOUBLE.pack(value)
    if isinstance(value, str):
        return field_bytes(3, value.encode())
    if isinstance(value, Mapping):
        return field_bytes(5, struct_bytes(value))
    return field_bytes(6, b"".join(field_bytes(1, _value_bytes(v)) for v in value))


_DOUBLE = struct.Struct("<d")
_LEN_TYPES = {FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_MESSAGE}
_VARINT_EXTREMES = (2**64 - 1, 2**63, 2**63 - 1, 2**32, 2**31, 2**31 - 1, -1, -(2**31), 0)


def _any_field(rng: random.Random, message: Descriptor) -> FieldDescriptor:
    return rng.choice(list(message.fields))


def _flip_bit(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    if not data:
        return b"\x80"
    i = rng.randrange(len(data))
    return data[:i] + bytes([data[i] ^ 1 << rng.randrange(8)]) + data[i + 1 :]


def _set_byte(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    if not data:
        return b"\xff"
    i = rng.randrange(len(data))
    value = rng.choice((0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)))
    return data[:i] + bytes([value]) + data[i + 1 :]


def _truncate(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    return data[: rng.randrange(len(data))] if data else data


def _duplicate(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    # A whole copy is a legal merge; a copied slice usually is not.
    if rng.random() < 0.5 or not data:
        return data * rng.choice((2, 3, 17))
    start = rng.randrange(len(data))
    return data + data[start : start + rng.randrange(1, 64)]


def _splice(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + rng.randbytes(rng.randrange(1, 32)) + data[i:]


def _unknown_field(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    number = rng.choice((0, 1, 15, 16, 19_000, 19_999, 100, 536_870_911, 536_870_912, 2**32))
    number = number if rng.random() < 0.7 else rng.randrange(1, MAX_FIELD)
    wire_type = rng.randrange(8)  # 6 and 7 do not exist
    payload = {
        VARINT: varint(rng.choice(_VARINT_EXTREMES)),
        I64: rng.randbytes(8),
        LEN: varint(8) + rng.randbytes(8),
        I32: rng.randbytes(4),
    }.get(wire_type, b"")
    return data + tag(number, wire_type) + payload


def _wrong_wire_type(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    field = _any_field(rng, message)
    if field.type in _LEN_TYPES:
        wrong = rng.choice((field_varint(field.number, 7), tag(field.number, I64) + bytes(8)))
    else:
        wrong = field_bytes(field.number, rng.randbytes(rng.randrange(16)))
    return data + wrong


def _varint_extreme(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    field = _any_field(rng, message)
    if rng.random() < 0.2:
        # Eleven bytes of varint (over the 10-byte limit), or one that never ends.
        return data + tag(field.number, VARINT) + rng.choice((b"\xff" * 10 + b"\x01", b"\x80" * 12))
    return data + field_varint(field.number, rng.choice(_VARINT_EXTREMES))


def _lying_length(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    field = _any_field(rng, message)
    claimed = rng.choice((len(data) + 1, 2**31 - 1, 2**32 + 5, 2**63))
    return data + tag(field.number, LEN) + varint(claimed) + b"abc"


def _bad_utf8(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    strings = [f for f in message.fields if f.type == FieldDescriptor.TYPE_STRING]
    maps = [f for f in message.fields if f.message_type and f.message_type.GetOptions().map_entry]
    bad = rng.choice(BAD_UTF8)
    if maps and (not strings or rng.random() < 0.4):
        entry = field_bytes(rng.choice((1, 2)), bad)  # the key or the value
        return data + field_bytes(rng.choice(maps).number, entry)
    if strings:
        return data + field_bytes(rng.choice(strings).number, b"ok" + bad)
    return data + field_bytes(1, bad)


def _groups(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    field = _any_field(rng, message)
    return data + rng.choice((tag(field.number, SGROUP), tag(field.number, EGROUP)))


def _garbage_submessage(rng: random.Random, data: bytes, message: Descriptor) -> bytes:
    nested = [f for f in message.fields if f.type == FieldDescriptor.TYPE_MESSAGE]
    number = rng.choice(nested).number if nested else 1
    return data + field_bytes(number, rng.randbytes(rng.randrange(1, 48)))


Mutation = Callable[[random.Random, bytes, Descriptor], bytes]
MUTATIONS: dict[str, Mutation] = {
    "flip_bit": _flip_bit,
    "set_byte": _set_byte,
    "truncate": _truncate,
    "duplicate": _duplicate,
    "splice": _splice,
    "unknown_field": _unknown_field,
    "wrong_wire_type": _wrong_wire_type,
    "varint_extreme": _varint_extreme,
    "lying_length": _lying_length,
    "bad_utf8": _bad_utf8,
    "groups": _groups,
    "garbage_submessage": _garbage_submessage,
}


def mutate(rng: random.Random, data: bytes, message: Descriptor) -> tuple[str, bytes]:
    """One to three mutations of `data`, and their names joined by '+'."""
    names = rng.sample(sorted(MUTATIONS), rng.choice((1, 1, 2, 3)))
    for name in names:
        data = MUTATIONS[name](rng, data, message)
    return "+".join(names), data
