"""get_upstreams reads every page of GetUpstreams, in both Python clients.

The daemon answers at most 1,000 upstreams a page; a pod tracking more must
still be listed whole, each name once, with the profile and upstream filters
passed to every page. A server that never stops answering a next_page_token
is read a bounded number of pages, then refused (as botocore's paginator
raises PaginationError rather than loop on a token without end).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import grpc
import pytest

from conftest import Daemon, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk_client import AsyncSquawkClient, SquawkClient, SquawkError
from squawk_client._client import _MAX_PAGES

# More than two pages of 1,000, the daemon's page.
NAMES = [f"paged-{i:04d}" for i in range(2_500)]
# Of those, the ones reported under the llm profile.
LLM_NAMES = NAMES[::250]
SLOW_MACHINE = timedelta(seconds=10)
# A misbehaving server's address, and the requests it was sent.
Endless = tuple[str, list[pb.GetUpstreamsRequest]]


@pytest.fixture(scope="module")
def pod() -> Iterator[Daemon]:
    """A daemon tracking NAMES, reported 1,000 a call (ReportOutcome's limit)."""
    daemon = start_daemon()
    outcomes = [
        pb.Outcome(upstream=name, profile="llm" if name in LLM_NAMES else "", success=True)
        for name in NAMES
    ]
    with SquawkClient(daemon.target, call_timeout=SLOW_MACHINE, fallback=False) as client:
        for start in range(0, len(outcomes), 1_000):
            assert client.report_outcome(outcomes[start : start + 1_000]) == len(
                outcomes[start : start + 1_000]
            )
    yield daemon
    daemon.stop()


def _names(states: list[pb.UpstreamState]) -> Counter[str]:
    return Counter(s.upstream for s in states if s.upstream.startswith("paged-"))


def test_every_upstream_is_listed_once_across_pages(pod: Daemon) -> None:
    with SquawkClient(pod.target, fallback=False) as client:
        assert _names(client.get_upstreams()) == Counter(NAMES)


def test_the_async_client_lists_every_upstream_once(pod: Daemon) -> None:
    async def main() -> list[pb.UpstreamState]:
        async with AsyncSquawkClient(pod.target, fallback=False) as client:
            return await client.get_upstreams()

    assert _names(asyncio.run(main())) == Counter(NAMES)


def test_the_filters_reach_every_page(pod: Daemon) -> None:
    with SquawkClient(pod.target, fallback=False) as client:
        llm = client.get_upstreams("llm")
        assert _names(llm) == Counter(LLM_NAMES)
        assert {s.profile for s in llm} == {"llm"}
        one = client.get_upstreams(upstream=NAMES[1_234])
        assert [(s.profile, s.upstream) for s in one] == [("default", NAMES[1_234])]
        assert client.get_upstreams("llm", upstream=NAMES[1_234]) == []


def test_the_async_filters_reach_every_page(pod: Daemon) -> None:
    async def main() -> tuple[list[pb.UpstreamState], list[pb.UpstreamState]]:
        async with AsyncSquawkClient(pod.target, fallback=False) as client:
            return await client.get_upstreams("llm"), await client.get_upstreams(upstream=NAMES[7])

    llm, one = asyncio.run(main())
    assert _names(llm) == Counter(LLM_NAMES)
    assert [s.upstream for s in one] == [NAMES[7]]


def test_one_page_is_there_to_ask_for(pod: Daemon) -> None:
    with SquawkClient(pod.target, fallback=False) as client:
        first = client.get_upstreams_page(pb.GetUpstreamsRequest(page_size=1_000))
        assert len(first.upstreams) == 1_000 and first.truncated and first.next_page_token
        rest = client.get_upstreams_page(
            pb.GetUpstreamsRequest(page_size=1_000, page_token=first.next_page_token)
        )
        assert not {s.upstream for s in first.upstreams} & {s.upstream for s in rest.upstreams}


@pytest.fixture
def endless() -> Iterator[Endless]:
    """A misbehaving server, and the requests it was sent: every page says
    another follows."""
    requests: list[pb.GetUpstreamsRequest] = []

    def handler(body: bytes, context: grpc.ServicerContext) -> bytes:
        requests.append(pb.GetUpstreamsRequest.FromString(body))
        return pb.GetUpstreamsResponse(
            upstreams=[pb.UpstreamState(profile="default", upstream="again")],
            truncated=True,
            next_page_token="again",
        ).SerializeToString()

    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "squawk.v1.PolicyService",
                {"GetUpstreams": grpc.unary_unary_rpc_method_handler(handler)},
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", requests
    server.stop(None)


def test_a_listing_that_never_ends_is_refused_after_the_bound(
    endless: Endless,
) -> None:
    target, requests = endless
    with SquawkClient(target, fallback=False) as client, pytest.raises(SquawkError) as raised:
        client.get_upstreams("llm", upstream="u")
    assert raised.value.code == "ABORTED" and f"{_MAX_PAGES} pages" in raised.value.details
    assert len(requests) == _MAX_PAGES
    assert {(r.profile, r.upstream) for r in requests} == {("llm", "u")}


def test_the_async_client_stops_at_the_bound_too(endless: Endless) -> None:
    target, requests = endless

    async def main() -> None:
        async with AsyncSquawkClient(target, fallback=False) as client:
            await client.get_upstreams()

    with pytest.raises(SquawkError, match="stopped after"):
        asyncio.run(main())
    assert len(requests) == _MAX_PAGES
