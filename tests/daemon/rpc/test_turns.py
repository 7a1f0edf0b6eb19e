"""Large calls take turns: a small task waits behind one slice, not one per call."""

from __future__ import annotations

import asyncio

from squawk.daemon.server.rpc.turns import Turns


def _run_with_probe(calls: int, slices: int) -> list[int]:
    """How many slices of `calls` large calls run between two steps of a
    task that only yields, as a health check's steps do."""
    ran: list[str] = []

    async def large(turns: Turns) -> None:
        async with turns.turn() as turn:
            for _ in range(slices):
                # slice_s=0: every pause ends the slice.
                await turn.pause()
                ran.append("slice")

    async def probe(done: asyncio.Event) -> None:
        while not done.is_set():
            ran.append("probe")
            await asyncio.sleep(0)

    async def main() -> None:
        turns = Turns(slice_s=0.0)
        done = asyncio.Event()
        watcher = asyncio.create_task(probe(done))
        await asyncio.gather(*(large(turns) for _ in range(calls)))
        done.set()
        await watcher

    asyncio.run(main())
    assert ran.count("slice") == calls * slices
    between: list[int] = []
    count = 0
    for event in ran:
        if event == "probe":
            between.append(count)
            count = 0
        else:
            count += 1
    return between


def test_a_small_task_waits_behind_one_slice_of_eight_large_calls() -> None:
    between = _run_with_probe(calls=8, slices=50)
    # Every large call yielding after each slice, the probe would wait behind
    # eight; taking turns, behind one.
    assert max(between) <= 1, between


def test_a_call_cancelled_in_its_turn_hands_it_on() -> None:
    async def main() -> list[str]:
        turns = Turns(slice_s=0.0)
        order: list[str] = []
        held = asyncio.Event()

        async def stalled() -> None:
            async with turns.turn():
                held.set()
                await asyncio.Event().wait()  # until cancelled

        async def waiting() -> None:
            async with turns.turn() as turn:
                await turn.pause()
                order.append("served")

        first = asyncio.create_task(stalled())
        await held.wait()
        second = asyncio.create_task(waiting())
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.wait_for(second, timeout=5)
        return order

    assert asyncio.run(main()) == ["served"]
