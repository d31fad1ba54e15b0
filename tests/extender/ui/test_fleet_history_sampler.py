"""The fleet page's history (ui/fleet_history_sampler.py, served by fleet_page.py): sampled from the
page's own fleet document once a wall-clock minute, 30 s into it, and served as
`GET /ui/history.json`, at most 1440 points, only while the fleet page is on."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gpuextender.extender.state.fleet_history import MAX_POINTS, SERIES, STEP_S, FleetHistory, Sample
from gpuextender.extender.ui import fleet_page
from gpuextender.extender.ui.fleet_history_sampler import SAMPLE_AT_S, HistorySampler, next_sample_delay
from gpuextender.extender.ui.fleet_page import HISTORY
from tests.extender.builders import gpu, report
from tests.extender.ui.test_fleet_page import make_api, read_kubelet, run

T0 = 1_700_000_040  # a minute's start (Unix seconds)


@pytest.mark.parametrize(
    ("wall", "delay"),
    [
        (T0, SAMPLE_AT_S),
        (T0 + SAMPLE_AT_S - 0.25, 0.25),  # just before the sampling second
        (T0 + SAMPLE_AT_S, STEP_S),  # at it: sampled now, next minute's next
        (T0 + SAMPLE_AT_S + 0.25, STEP_S - 0.25),
        (T0 + STEP_S - 0.25, SAMPLE_AT_S + 0.25),
    ],
)
def test_samples_are_taken_30_seconds_into_each_wall_clock_minute(wall: float, delay: float) -> None:
    assert next_sample_delay(wall) == pytest.approx(delay)


def test_the_sampler_records_each_sample_at_the_wall_clock_minute_it_was_taken() -> None:
    walls = iter([T0 + 30, T0 + 30, T0 + 90, T0 + 90, T0 + 270, T0 + 270])  # one read to record, one to sleep
    samples = iter([Sample(1, 0, 0, 0, 0), Sample(2, 0, 0, 0, 1), Sample(3, 1, 1, 1, 2)])
    done = asyncio.Event()

    async def read() -> Sample:
        try:
            return next(samples)
        except StopIteration:
            done.set()
            await asyncio.Event().wait()  # never: the test stops the sampler here
            raise

    history = FleetHistory()
    sampler = HistorySampler(history, read, wall=lambda: next(walls), delay=lambda _wall: 0.0)

    async def go() -> None:
        task = asyncio.create_task(sampler.run())
        await done.wait()
        task.cancel()

    asyncio.run(go())
    points = history.points(T0 + 270)
    assert [(p.minute - T0, p.sample.free_idle) for p in points] == [(0, 1), (60, 2), (240, 3)]


def test_a_failed_sample_is_a_minute_without_a_point_and_the_sampler_goes_on() -> None:
    calls = 0

    async def read() -> Sample:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the build failed")
        return Sample(4, 0, 0, 0, 0)

    history = FleetHistory()
    sampler = HistorySampler(history, read, wall=lambda: T0 + 5)
    asyncio.run(sampler.sample_once())
    assert len(history) == 0 and sampler.failures == 1
    asyncio.run(sampler.sample_once())
    assert len(history) == 1 and sampler.failures == 1


def test_the_document_has_every_point_of_the_day_and_no_more() -> None:
    history = FleetHistory()
    for i in range(MAX_POINTS + 1):
        history.record(T0 + i * STEP_S, Sample(None, None, None, None, i) if i == 5 else Sample(i, 0, 0, 1, i))
    now = T0 + MAX_POINTS * STEP_S
    doc = HistorySampler(history, read=_never, wall=lambda: now).document()
    assert (
        doc["series"] == list(SERIES) == ["free-idle", "holder-unknown-idle", "allocated-idle", "unhealthy", "waiting"]
    )
    assert (doc["stepSeconds"], doc["maxPoints"]) == (60, 1440)
    assert len(doc["points"]) == MAX_POINTS
    assert doc["points"][0] == [T0 + STEP_S, 1, 0, 0, 1, 1] and doc["points"][-1][0] == now
    assert doc["points"][4] == [T0 + 5 * STEP_S, None, None, None, None, 5]  # no GPU data: null, not 0


async def _never() -> Sample:
    raise AssertionError("not sampled here")


@pytest.fixture
def app_wall(monkeypatch: pytest.MonkeyPatch) -> float:
    """The app's sampler on a fixed wall clock, 20 s into a minute, sampling at start and then not
    for an hour (the tests below own the clock)."""
    wall = T0 + 20.0
    monkeypatch.setattr(fleet_page, "HistorySampler", partial(HistorySampler, wall=lambda: wall, delay=lambda _: 3600))
    return wall


async def first_sample(client: TestClient[Any, Any]) -> HistorySampler:
    sampler = client.server.app[HISTORY]
    for _ in range(500):  # the first sample is a fleet build, started as the app starts
        if len(sampler.history):
            return sampler
        await asyncio.sleep(0.01)
    raise AssertionError("no sample taken at start")


def test_history_json_serves_what_the_fleet_page_counted(app_wall: float) -> None:
    """The app samples at start: the point holds the page's own totals (make_api: h100-node 3 idle
    and 1 busy, plain-node 1 idle and 1 busy, l40s-node unknown) and no pod waiting."""

    async def check(client: TestClient[Any, Any]) -> None:
        await first_sample(client)
        response = await client.get("/ui/history.json")
        assert response.status == 200 and response.content_type == "application/json"
        assert response.headers["Cache-Control"] == "no-store"
        doc = await response.json()
        fleet = await (await client.get("/ui/fleet.json", headers={"Accept-Encoding": "identity"})).json()
        counts = fleet["totals"]["counts"]
        assert doc["points"] == [
            [
                T0,
                counts["free-idle"],
                counts["holder-unknown-idle"],
                counts["allocated-idle"],
                counts["unhealthy"],
                len(fleet["waiting"]),
            ]
        ]
        assert doc["points"] == [[T0, 4, 0, 0, 0, 0]]

    run(make_api(), check)


def test_history_json_is_bounded_and_gzipped_for_browsers_that_accept_it(app_wall: float) -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        history = (await first_sample(client)).history
        for i in range(MAX_POINTS + 1):  # the 1441 minutes up to the sampler's, oldest first
            history.record(T0 - (MAX_POINTS - i) * STEP_S, Sample(i, i, i, i, i))
        plain = await client.get("/ui/history.json", headers={"Accept-Encoding": "identity"})
        assert "Content-Encoding" not in plain.headers
        body = await plain.read()
        packed = await client.get("/ui/history.json", headers={"Accept-Encoding": "gzip"})
        assert packed.headers["Content-Encoding"] == "gzip"
        doc = await packed.json()
        assert len(doc["points"]) == MAX_POINTS
        assert doc["points"][0][0] == T0 - (MAX_POINTS - 1) * STEP_S and doc["points"][-1][0] == T0
        assert int(packed.headers["Content-Length"]) < len(body) / 4

    run(make_api(), check)


def test_no_fleet_page_no_history() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        assert (await client.get("/ui/history.json")).status == 404
        assert HISTORY not in client.server.app

    run(make_api(fleet_page=False), check)


def test_a_sample_reuses_a_browsers_fresh_build_and_no_browser_is_served_the_samplers() -> None:
    api = make_api()
    clock = [0.0]
    expected = Sample(4, 0, 0, 0, 0)  # make_api's fleet, as test_history_json_serves_what_the_fleet_page_counted

    async def go() -> None:
        cache = fleet_page.FleetCache(api, ttl_s=1.5, clock=lambda: clock[0])
        assert await cache.sample() == expected
        assert cache.builds == 0  # its own build, kept from browsers: a first page load builds afresh
        await cache.get()
        assert cache.builds == 1
        clock[0] = 1.4  # the browser's build still fresh: the sample is its
        api.state.ingest(read_kubelet(report("l40s-node", [gpu(0, 0, 1)])), 5_000.0)  # one more free-idle GPU
        assert await cache.sample() == expected and cache.builds == 1
        clock[0] = 1.5  # stale at exactly the cache period: the sample builds its own
        assert await cache.sample() == Sample(5, 0, 0, 0, 0) and cache.builds == 1

    asyncio.run(go())
