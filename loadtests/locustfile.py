"""The locustfile of `citadel load` (run it through loadtests/run_load.py, which sets its settings).

Four kinds of virtual user, each one end user of one tenant (drawn from Zipf distributions, with a
user context minted for it when it starts, re-minted before it expires):
- `RetrieveUser`: POST /v1/retrieve;
- `AnswerUser`: POST /v1/answer (200, or 202 when an answer is held for review);
- `AgentRunUser`: a conversation, a message (202 with a run id), then the run's events read with
  `Accept: application/json` until a `final` or `error` event, for at most `run_wait_s`; the whole
  run is also reported as one `RUN agentic run` entry;
- `AdminUploadUser`: one admin, beside the shape's end users, uploads a small document to a tenant
  (Zipf-drawn) every 30 s (only when the settings carry an admin token; the runner leaves it out
  otherwise).

The shape is the one `CITADEL_LOAD_SHAPE` names (loadtests/shapes.py); it ends the run at its time.
Importing this module imports locust, which monkey-patches the process with gevent: only locust's own
process should import it.
"""

from __future__ import annotations

import itertools
import os
import time

from locust import HttpUser, LoadTestShape, between, constant_pacing, events, task

from loadtests.population import Identity, LoadSettings, Population, mint_user_context
from loadtests.shapes import make_shape

SETTINGS = LoadSettings.from_env()
HTTP_TIMEOUT_S = 60.0
EVENTS_POLL_S = 0.25
REMINT_MARGIN_S = 30.0
ADMIN_USERS = 1 if SETTINGS.admin_token else 0
UPLOAD_EVERY_S = 30.0
UPLOAD_DOCUMENTS = 5  # uploads cycle through this many document ids, so repeated runs add versions, not documents
_virtual_users = itertools.count()


class _EndUser(HttpUser):
    abstract = True
    think_time = between(0.5, 1.5)

    def wait_time(self) -> float:
        """The user's think time, or longer while a 503's Retry-After asks it to stay away (a
        well-behaved client: a shed request is not retried at once)."""
        return max(self.think_time(), self._retry_at - time.monotonic())

    def on_start(self) -> None:
        self._retry_at = 0.0
        self.index = next(_virtual_users)
        self.population = Population(SETTINGS.workload, SETTINGS.seed * 1_000_003 + self.index)
        self.identity: Identity = self.population.draw()
        self._context, self._expires = "", 0.0
        self._turn = self.index
        self.headers()  # the virtual user's own context, minted now; re-minted before it expires

    def headers(self, **extra: str) -> dict:
        now = time.time()
        if now > self._expires - REMINT_MARGIN_S:
            self._context = mint_user_context(SETTINGS, self.identity, now)
            self._expires = now + SETTINGS.context_ttl_s
        return {"authorization": f"Bearer {SETTINGS.service_token}", "x-citadel-user-context": self._context,
                **extra}

    def question(self) -> str:
        self._turn += 1
        return self.identity.questions[self._turn % len(self.identity.questions)]

    def post_json(self, path: str, body: dict | None, name: str, ok: tuple[int, ...]):
        with self.client.post(path, json=body, headers=self.headers(), name=name, timeout=HTTP_TIMEOUT_S,
                              catch_response=True) as response:
            if response.status_code in ok:
                response.success()
                return response
            if response.status_code == 503 and response.headers.get("retry-after", "").isdigit():
                self._retry_at = time.monotonic() + int(response.headers["retry-after"])
            response.failure(f"{response.status_code} {response.text[:200]}")
            return None


class RetrieveUser(_EndUser):
    weight = 10

    @task
    def retrieve(self) -> None:
        self.post_json("/v1/retrieve", {"query": self.question(), "top_k": 5}, "/v1/retrieve", (200,))


class AnswerUser(_EndUser):
    weight = 6

    @task
    def answer(self) -> None:
        self.post_json("/v1/answer", {"question": self.question()}, "/v1/answer", (200, 202))


class AgentRunUser(_EndUser):
    weight = 2
    think_time = between(2.0, 5.0)

    @task
    def agentic_run(self) -> None:
        started = time.perf_counter()
        outcome = self._run()
        events.request.fire(request_type="RUN", name="agentic run", response_time=(time.perf_counter() - started) * 1e3,
                            response_length=0, response=None, context={},
                            exception=None if outcome is None else RuntimeError(outcome))

    def _run(self) -> str | None:
        """None when the run ended in `final`; else why it did not."""
        created = self.post_json("/v1/conversations", None, "/v1/conversations", (201,))
        if created is None:
            return "conversation not created"
        conversation = created.json()["conversation_id"]
        posted = self.post_json(f"/v1/conversations/{conversation}/messages", {"content": self.question()},
                                "/v1/conversations/[id]/messages", (202,))
        if posted is None:
            return "message not accepted"
        run_id, seq = posted.json()["run_id"], 0
        deadline = time.monotonic() + SETTINGS.run_wait_s
        while time.monotonic() < deadline:
            with self.client.get(f"/v1/runs/{run_id}/events", params={"after_seq": seq}, name="/v1/runs/[id]/events",
                                 headers=self.headers(accept="application/json"), timeout=HTTP_TIMEOUT_S,
                                 catch_response=True) as response:
                if response.status_code != 200:
                    response.failure(f"{response.status_code} {response.text[:200]}")
                    return "events unavailable"
                page = response.json()
            if page:
                seq = page[-1]["seq"]
            kinds = {event["type"] for event in page}
            if "final" in kinds:
                return None
            if "error" in kinds:
                return "the run ended in an error event"
            time.sleep(EVENTS_POLL_S)
        return f"no final event within {SETTINGS.run_wait_s:g} s"


class AdminUploadUser(HttpUser):
    fixed_count = ADMIN_USERS  # one uploader beside the shape's end users, however few they are
    wait_time = constant_pacing(UPLOAD_EVERY_S)

    def on_start(self) -> None:
        self.index = next(_virtual_users)
        self.population = Population(SETTINGS.workload, SETTINGS.seed * 1_000_003 + self.index)
        self.uploads = itertools.count()

    @task
    def upload(self) -> None:
        if not SETTINGS.admin_token:
            return
        spec = self.population.tenant_spec()
        number = next(self.uploads) % UPLOAD_DOCUMENTS
        body = {"document_id": f"load-upload-{number}", "filename": f"load-upload-{number}.md",
                "groups": sorted({g for groups in spec.group_sets for g in groups}),
                "text": f"# Load upload {number}\n\n## Note\n\nUploaded by a load test at {time.time():.0f}.\n"}
        with self.client.post(f"/v1/admin/tenants/{spec.tenant}/documents", json=body, timeout=HTTP_TIMEOUT_S,
                              name="/v1/admin/tenants/[tenant]/documents", catch_response=True,
                              headers={"authorization": f"Bearer {SETTINGS.admin_token}"}) as response:
            if response.status_code == 202:
                response.success()
            else:
                response.failure(f"{response.status_code} {response.text[:200]}")


_SHAPE = make_shape(os.environ.get("CITADEL_LOAD_SHAPE", "step"), float(os.environ.get("CITADEL_LOAD_RUN_S", "60")),
                    int(os.environ.get("CITADEL_LOAD_USERS", "10")))


class CitadelShape(LoadTestShape):
    """The run's shape (loadtests/shapes.py), in seconds since the test started, plus the one admin
    uploader when there is one; None ends the run."""

    use_common_options = True  # the runner passes --run-time too, as a backstop; the shape ends first

    def tick(self):
        tick = _SHAPE.tick(self.get_run_time())
        return None if tick is None else (tick[0] + ADMIN_USERS, tick[1])
