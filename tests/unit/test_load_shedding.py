"""Load shedding at the gateway (serving/http/admission.py): a replica runs at most
`admission_max_in_flight` user POSTs at once, lets `admission_max_waiting` more wait up to
`admission_max_wait_s`, and refuses the rest at once with 503 `overloaded` and Retry-After; reads,
admin routes and public paths never take a slot; MCP calls (POST /mcp) take one like /v1/."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI

from citadel.config import CitadelConfig
from citadel.errors import Overloaded
from serving.http.admission import Admission, Shedder


def _shedder(in_flight: int = 1, waiting: int = 1, wait_s: float = 5.0) -> Shedder:
    return Shedder(in_flight, waiting, wait_s, retry_after_s=3)


def test_a_free_slot_is_taken_at_once_and_the_excess_waits_then_is_refused():
    async def scenario():
        shedder = _shedder(in_flight=1, waiting=1)
        await shedder.acquire()  # the one slot
        waiter = asyncio.create_task(shedder.acquire())
        await asyncio.sleep(0)
        assert shedder.waiting == 1 and not waiter.done()
        with pytest.raises(Overloaded) as refused:  # the queue is full: refused without waiting
            await shedder.acquire()
        assert refused.value.http_status == 503 and refused.value.retry_after_s == 3
        shedder.release()
        await asyncio.wait_for(waiter, 1)  # the waiter gets the freed slot
        assert shedder.waiting == 0 and shedder.shed == 1

    asyncio.run(scenario())


def test_a_waiter_is_refused_when_no_slot_frees_within_the_wait():
    async def scenario():
        shedder = _shedder(in_flight=1, waiting=4, wait_s=0.05)
        await shedder.acquire()
        with pytest.raises(Overloaded):
            await shedder.acquire()
        assert shedder.waiting == 0 and shedder.shed == 1
        shedder.release()
        await asyncio.wait_for(shedder.acquire(), 1)  # the refused waiter holds nothing

    asyncio.run(scenario())


# ---------------------------------------------------------------------- through the middleware
class _Access:
    def caller(self, authorization, user_context):
        return SimpleNamespace(principal=SimpleNamespace(tenant_id="acme"))

    def admin(self, authorization):
        return SimpleNamespace(id="admin")


def _app(release: asyncio.Event, started: list, access=None) -> FastAPI:
    services = SimpleNamespace(access=access or _Access(), config=_config(1, 0))
    app = FastAPI()

    @app.post("/v1/work")
    async def work() -> dict:
        started.append(1)
        await release.wait()
        return {"ok": True}

    @app.get("/v1/work")
    async def read() -> dict:
        return {"ok": True}

    @app.post("/v1/admin/work")
    async def admin_work() -> dict:
        return {"ok": True}

    @app.post("/mcp")
    async def mcp() -> dict:
        return {"ok": True}

    app.add_middleware(Admission, services_of=lambda scope: services)
    return app


def test_a_post_beyond_the_bound_is_a_503_with_retry_after_and_reads_and_admin_pass():
    async def scenario():
        release, started = asyncio.Event(), []
        app = _app(release, started)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            holding = asyncio.create_task(client.post("/v1/work", json={}))
            while not started:
                await asyncio.sleep(0.001)
            refused = await client.post("/v1/work", json={})
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "overloaded"
            assert (await client.get("/v1/work")).status_code == 200  # a read takes no slot
            assert (await client.post("/v1/admin/work", json={})).status_code == 200
            assert (await client.post("/mcp", json={})).status_code == 503  # MCP tool calls share the slots
            release.set()
            assert (await holding).status_code == 200
            assert (await client.post("/v1/work", json={})).status_code == 200  # the slot came back

    asyncio.run(scenario())


def test_a_failing_route_gives_its_slot_back():
    async def scenario():
        config = CitadelConfig()
        config.serving.admission_max_in_flight = 1
        config.serving.admission_max_waiting = 0
        services = SimpleNamespace(access=_Access(), config=config)
        app = FastAPI()

        @app.post("/v1/boom")
        async def boom() -> dict:
            raise RuntimeError("a bug")

        app.add_middleware(Admission, services_of=lambda scope: services)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            assert (await client.post("/v1/boom", json={})).status_code == 500
            assert (await client.post("/v1/boom", json={})).status_code == 500  # not 503: the slot was freed

    asyncio.run(scenario())


def test_a_refusal_when_the_queue_is_full_comes_before_authentication_and_the_body():
    async def scenario():
        release, started = asyncio.Event(), []
        checked = []
        app = _app(release, started, _CountingAccess(checked))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            holding = asyncio.create_task(client.post("/v1/work", json={}))
            while not started:
                await asyncio.sleep(0.001)
            checked.clear()
            refused = await client.post("/v1/work", content=b"x" * 10_000_000)  # over any body limit, unread
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "overloaded"
            assert checked == []  # no credential was verified for it
            release.set()
            assert (await holding).status_code == 200

    asyncio.run(scenario())


class _CountingAccess(_Access):
    def __init__(self, checked: list):
        self.checked = checked

    def caller(self, authorization, user_context):
        self.checked.append(1)
        return super().caller(authorization, user_context)


def _config(in_flight: int, waiting: int) -> CitadelConfig:
    config = CitadelConfig()
    config.serving.admission_max_in_flight = in_flight
    config.serving.admission_max_waiting = waiting
    return config
