"""One page of the event history as GetEvents answers it: the rule for the
request's fields and the reply's shape, which the gRPC method and the
metrics port's /events (JSON of the same message) both serve."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs

from squawk.policy import PolicyInputError
from squawk.policy.limits import MAX_NAME_CHARS, check_chars
from squawk.policy.text import shown_text
from squawk.v1 import policy_pb2 as pb

from .events import Event, EventRing

__all__ = ["DEFAULT_PAGE", "MAX_QUERY_CHARS", "answer", "fill_event", "request_from_query"]

# A page when page_size is unset.
DEFAULT_PAGE = 100
# /events' query string: its four fields at their longest fit well within.
MAX_QUERY_CHARS = 2048
_KINDS = {
    "breaker": pb.EVENT_KIND_BREAKER,
    "fleet_breaker": pb.EVENT_KIND_FLEET_BREAKER,
    "pace": pb.EVENT_KIND_PACE,
    "cool_down": pb.EVENT_KIND_COOL_DOWN,
    "shed": pb.EVENT_KIND_SHED,
    "fleet_caution": pb.EVENT_KIND_FLEET_CAUTION,
}
_INT64_MAX = 2**63 - 1


def answer(
    ring: EventRing, request: pb.GetEventsRequest, known: Callable[[str], object]
) -> pb.GetEventsResponse:
    """The page `request` asks for; PolicyInputError naming a bad field.
    `known(profile)` refuses a profile the policy does not have."""
    if request.profile:
        known(request.profile)
    check_chars("upstream", request.upstream, MAX_NAME_CHARS)
    if request.page_size < 0:
        raise PolicyInputError("page_size", f"must not be negative, got {request.page_size}")
    last = ring.last
    if not 0 <= request.after <= last:
        raise PolicyInputError(
            "after",
            f"must be from 0 to the latest event's number, {last}, got {request.after} "
            "(a number from another daemon process? start again from 0)",
        )
    # The ring holds names as shown; a caller's name is looked for so.
    upstream = shown_text(request.upstream, MAX_NAME_CHARS) if request.upstream else None
    page = ring.page(
        request.after, upstream, request.page_size or DEFAULT_PAGE, request.profile or None
    )
    reply = pb.GetEventsResponse(next_after=page.next_after, lost=page.lost)
    for event in page.events:
        fill_event(event, reply.events.add())
    return reply


def request_from_query(query: str) -> pb.GetEventsRequest:
    """/events' query string (after, profile, upstream, page_size) as the
    request; PolicyInputError naming a bad or repeated field."""
    if len(query) > MAX_QUERY_CHARS:
        raise PolicyInputError("query", f"must be at most {MAX_QUERY_CHARS} characters")
    try:
        fields = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise PolicyInputError("query", "is not a query string of name=value pairs") from None
    request = pb.GetEventsRequest()
    for name, values in fields.items():
        if name not in ("after", "profile", "upstream", "page_size"):
            raise PolicyInputError(
                shown_text(name, 64), "is not a field: after, profile, upstream, page_size"
            )
        if len(values) != 1:
            raise PolicyInputError(name, "must be given once")
        value = values[0]
        if name in ("profile", "upstream"):
            setattr(request, name, value)
            continue
        text = value.removeprefix("-")
        if not (text.isascii() and text.isdigit() and len(text) <= 18):
            raise PolicyInputError(name, f"must be a whole number, got {shown_text(value, 64)!r}")
        number = int(value)
        if name == "page_size":
            request.page_size = max(min(number, 2**31 - 1), -(2**31))
        else:
            request.after = max(min(number, _INT64_MAX), -_INT64_MAX)
    return request


def fill_event(event: Event, out: pb.Event) -> None:
    out.number = event.seq
    out.time.FromNanoseconds(int(event.at * 1e9))
    out.kind = _KINDS[event.kind]
    out.profile = event.profile
    out.upstream = event.upstream
    out.before = event.before
    out.after = event.after
    out.cause = event.cause
    if event.until is not None:
        out.until.FromNanoseconds(int(event.until * 1e9))
