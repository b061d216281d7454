"""What a route is given (FastAPI `Depends`): the serving services, the runner of blocking service work,
the verified admin or caller, and the request's ids. No route looks anything up itself. Each provider
is `async def` although none awaits: FastAPI runs a plain `def` dependency on a worker thread, a hop
per dependency per request.

The services are the app's (`app.state.services`: `create_api(services)` installs them; a test may
set them after building the app), with the app's worker pool (`app.state.executor`; None: the event
loop's default pool). Until they are there, every route but the public ones answers 503 `overloaded`.

This is the edge: each request's deadline (`serving.request_timeout_s`) is opened here, by the runner,
as a `deadline_scope`, and the service method runs on the worker pool (sized in config: in the split
topology those threads mostly wait on other deployments) in a copy of this context, so every hop
below bounds itself by what is left.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import time
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Optional

from fastapi import Depends, Header, Request

from citadel.errors import CitadelError, DeadlineExceeded, Overloaded
from citadel.identity.credentials import ServiceIdentity
from citadel.resilience.clock import MonotonicClock
from citadel.resilience.deadline import Deadline, deadline_scope
from serving.http.errors import request_id_of
from serving.services.access import Caller
from serving.services.compose import Services


def services_of_scope(scope: dict) -> Services | None:
    """The app's services for an ASGI scope (the admission middleware's view; None while starting)."""
    return getattr(getattr(scope.get("app"), "state", None), "services", None)


def services_of(request: Request) -> Services:
    services = getattr(request.app.state, "services", None)
    if services is None:
        raise Overloaded("the gateway is still starting")
    return services


async def get_services(request: Request) -> Services:
    return services_of(request)


ServicesDep = Annotated[Services, Depends(get_services)]


class BlockingRunner:
    """Runs blocking service work on the worker pool within the request's deadline, opened here."""

    def __init__(self, executor: concurrent.futures.Executor | None, timeout_s: float,
                 clock: MonotonicClock = MonotonicClock()):
        self.executor = executor
        self.timeout_s = timeout_s
        self.clock = clock

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        with deadline_scope(Deadline.after(self.timeout_s, self.clock)) as deadline:
            context = contextvars.copy_context()  # the worker thread sees this request's deadline
            future = asyncio.get_running_loop().run_in_executor(self.executor,
                                                                functools.partial(context.run, fn, *args))
            try:
                return await asyncio.wait_for(future, deadline.remaining())
            except asyncio.TimeoutError:
                raise DeadlineExceeded(f"no answer within {self.timeout_s:g} s") from None


def runner_of(request: Request, services: Services) -> BlockingRunner:
    return BlockingRunner(getattr(request.app.state, "executor", None), services.config.serving.request_timeout_s)


async def get_runner(request: Request, services: ServicesDep) -> BlockingRunner:
    return runner_of(request, services)


Blocking = Annotated[BlockingRunner, Depends(get_runner)]


async def get_admin(request: Request, services: ServicesDep,
              authorization: Optional[str] = Header(None)) -> ServiceIdentity:
    """The admin serving/http/admission.py verified before the body was read (verified here only when
    the app runs without that middleware). The header is declared so the OpenAPI document shows it."""
    return getattr(request.state, "admin", None) or services.access.admin(authorization)


Admin = Annotated[ServiceIdentity, Depends(get_admin)]


async def get_caller(request: Request, services: ServicesDep, authorization: Optional[str] = Header(None),
               x_citadel_user_context: Optional[str] = Header(None)) -> Caller:
    """The end user serving/http/admission.py verified before the body was read (401 before any
    work; verified here only when the app runs without that middleware)."""
    return getattr(request.state, "caller", None) or services.access.caller(authorization, x_citadel_user_context)


CallerDep = Annotated[Caller, Depends(get_caller)]


@dataclass(frozen=True)
class RequestIds:
    """The server's id of this request and the client's correlation id, for the query services' logs."""

    request_id: str
    correlation_id: str | None


async def get_request_ids(request: Request) -> RequestIds:
    return RequestIds(request_id_of(request), getattr(request.state, "correlation_id", None))


Ids = Annotated[RequestIds, Depends(get_request_ids)]


class CallerWork:
    """An end user's request: the service method `(caller, *args)` on the worker threads, counted per
    endpoint, tenant and status."""

    def __init__(self, caller: Caller, run: BlockingRunner, services: Services):
        self.caller = caller
        self._run = run
        self._metrics = services.metrics

    async def __call__(self, endpoint: str, method: Callable[..., Any], *args: Any) -> Any:
        tenant_id = self.caller.principal.tenant_id
        started = time.perf_counter()
        try:
            result = await self._run(method, self.caller, *args)
        except CitadelError as error:
            self._metrics.count_request(endpoint, tenant_id, error.http_status, time.perf_counter() - started)
            raise
        self._metrics.count_request(endpoint, tenant_id, 200, time.perf_counter() - started)
        return result


async def get_caller_work(caller: CallerDep, run: Blocking, services: ServicesDep) -> CallerWork:
    return CallerWork(caller, run, services)


AsCaller = Annotated[CallerWork, Depends(get_caller_work)]
