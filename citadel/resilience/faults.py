"""Fault injection for failure drills: added latency, errors, hangs and replica kills, per stage.

Off unless enabled: a deployment built with fault injection disabled gets `NO_FAULTS`, whose
`before()` does nothing. When enabled, an admin writes a `FaultSpec` into a `FaultStore` (one JSON
file per stage in a directory every replica on the machine shares) and each stage call starts with
`FaultInjector.before()`. The store re-stats a stage's file at most once per `check_interval_s`, so
with no fault set the request path costs a clock read.

Kills end the process (`os._exit`) so Ray Serve restarts the replica. Process memory is gone after
that, so executed kill nonces are recorded in `<dir>/<stage>.killed`: the restarted replica reads
it and does not kill itself again for the same nonce.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import math
import os
import random
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from citadel.errors import InjectedFault
from citadel.locks import file_lock

log = logging.getLogger(__name__)

# The deployments a drill may target; a closed set so a typo ("retreiver") is refused instead of
# silently injecting nothing.
STAGES = frozenset({"gateway", "embedder", "retriever", "reranker", "router", "generator", "catalog", "cache"})
DEFAULT_CHECK_INTERVAL_S = 0.5
# A hung call polls the store this often, so clearing the fault releases it within about this long.
HANG_POLL_S = 0.5
DEFAULT_MAX_HANG_S = 300.0
# Upper bounds so a fat-fingered spec cannot park a replica for a day.
MAX_HANG_CAP_S = 3600.0
MAX_LATENCY_MS = 600_000.0
_MS_PER_S = 1000.0
_NONCE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")  # stored one per line in the .killed file
_SPEC_SUFFIX = ".json"
_KILLED_SUFFIX = ".killed"


def _exit_replica() -> None:
    # os._exit, not sys.exit: skip cleanup handlers so it looks like a crash to Serve.
    os._exit(1)


class FaultSpec(BaseModel):
    """What to inject into one stage. Applied in order: kill, hang, added latency, error."""

    model_config = ConfigDict(extra="forbid")

    stage: str
    latency_ms: float = Field(0.0, ge=0, le=MAX_LATENCY_MS)
    # fixed: latency_ms; uniform: latency_ms ± jitter; exponential: mean latency_ms;
    # lognormal: median latency_ms, sigma = jitter / latency_ms.
    latency_dist: Literal["fixed", "uniform", "exponential", "lognormal"] = "fixed"
    latency_jitter_ms: float = Field(0.0, ge=0, le=MAX_LATENCY_MS)
    error_rate: float = Field(0.0, ge=0, le=1)
    hang: bool = False
    max_hang_s: float = Field(DEFAULT_MAX_HANG_S, gt=0, le=MAX_HANG_CAP_S)
    replicas: Literal["all"] | list[int] = "all"
    kill: bool = False
    kill_nonce: str | None = None
    created_at: float | None = None  # wall-clock seconds; stamped by FaultStore.set when unset

    @field_validator("stage")
    @classmethod
    def _known_stage(cls, value: str) -> str:
        if value not in STAGES:
            raise ValueError(f"unknown stage {value!r}; expected one of {sorted(STAGES)}")
        return value

    @field_validator("replicas")
    @classmethod
    def _ranks(cls, value: Literal["all"] | list[int]) -> Literal["all"] | list[int]:
        if value != "all" and any(rank < 0 for rank in value):
            raise ValueError("replica ranks are >= 0")
        return value

    @field_validator("kill_nonce")
    @classmethod
    def _nonce_shape(cls, value: str | None) -> str | None:
        if value is not None and not _NONCE_RE.match(value):
            raise ValueError("kill_nonce: 1-64 characters of [A-Za-z0-9_.:-]")
        return value

    @model_validator(mode="after")
    def _kill_has_nonce(self) -> FaultSpec:
        # Every kill needs a nonce, or "once per nonce" cannot hold across restarts.
        if self.kill and self.kill_nonce is None:
            self.kill_nonce = uuid.uuid4().hex
        return self

    def targets(self, rank: int) -> bool:
        return self.replicas == "all" or rank in self.replicas


@dataclass
class _Cached:
    checked_at: float
    identity: tuple[int, int, int] | None  # (inode, mtime_ns, size); None when no file
    spec: FaultSpec | None


class FaultStore:
    """Fault specs on disk, one `<stage>.json` per stage, shared by every process using `directory`."""

    def __init__(self, directory: Path, clock: Callable[[], float] = time.time,
                 check_interval_s: float = DEFAULT_CHECK_INTERVAL_S):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._interval = check_interval_s
        self._cache: dict[str, _Cached] = {}
        self._lock = threading.Lock()

    def path(self, stage: str) -> Path:
        return self.directory / f"{stage}{_SPEC_SUFFIX}"

    def killed_path(self, stage: str) -> Path:
        return self.directory / f"{stage}{_KILLED_SUFFIX}"

    def set(self, spec: FaultSpec) -> FaultSpec:
        """Write the spec atomically (tmp + rename: readers see the old or the new, never half)."""
        if spec.created_at is None:
            spec = spec.model_copy(update={"created_at": self._clock()})
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{spec.stage}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(spec.model_dump_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path(spec.stage))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._forget(spec.stage)
        return spec

    def clear(self, stage: str) -> None:
        # The .killed ledger stays: re-setting an old nonce must not kill again.
        self.path(stage).unlink(missing_ok=True)
        self._forget(stage)

    def clear_all(self) -> None:
        for spec_file in self.directory.glob(f"*{_SPEC_SUFFIX}"):
            spec_file.unlink(missing_ok=True)
        with self._lock:
            self._cache.clear()

    def list(self) -> builtins.list[FaultSpec]:  # builtins: `list` is this method inside the class
        specs = (self._read(p) for p in sorted(self.directory.glob(f"*{_SPEC_SUFFIX}")))
        return [s for s in specs if s is not None]

    def get(self, stage: str, *, fresh: bool = False) -> FaultSpec | None:
        """The stage's spec; re-stats the file at most once per check interval unless `fresh`."""
        now = self._clock()
        with self._lock:
            cached = self._cache.get(stage)
            # A clock that stepped back (wall clock) re-checks rather than stalling.
            if cached and not fresh and 0 <= now - cached.checked_at < self._interval:
                return cached.spec
        path = self.path(stage)
        try:
            st = os.stat(path)
            identity: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            identity = None
        if cached and cached.identity == identity:
            spec = cached.spec
        else:
            spec = self._read(path) if identity else None
        with self._lock:
            self._cache[stage] = _Cached(now, identity, spec)
        return spec

    def _forget(self, stage: str) -> None:
        with self._lock:
            self._cache.pop(stage, None)

    @staticmethod
    def _read(path: Path) -> FaultSpec | None:
        # A hand-edited or vanished file injects nothing: failing safe means serving normally.
        try:
            return FaultSpec.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            log.warning("ignoring unreadable fault spec %s: %s", path, exc)
            return None


def sample_latency_s(spec: FaultSpec, rng: random.Random) -> float:
    """One added-latency draw in seconds, per the spec's distribution, clipped to [0, MAX_LATENCY_MS]."""
    base, jitter = spec.latency_ms, spec.latency_jitter_ms
    if spec.latency_dist == "uniform":
        ms = rng.uniform(base - jitter, base + jitter)
    elif spec.latency_dist == "exponential":
        ms = rng.expovariate(1.0 / base) if base > 0 else 0.0
    elif spec.latency_dist == "lognormal":
        ms = rng.lognormvariate(math.log(base), jitter / base) if base > 0 else 0.0
    else:
        ms = base
    return min(max(ms, 0.0), MAX_LATENCY_MS) / _MS_PER_S


class FaultInjector:
    """Applies the store's spec for one stage at the start of each call (`before` / `before_async`)."""

    def __init__(self, store: FaultStore, stage: str, rank_fn: Callable[[], int] = lambda: 0,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None,
                 exit_fn: Callable[[], None] = _exit_replica,
                 async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        self.store, self.stage = store, stage
        self._rank_fn, self._sleep, self._async_sleep, self._exit = rank_fn, sleep, async_sleep, exit_fn
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._settled_nonces: set[str] = set()  # nonces already checked against the ledger

    def before(self) -> None:
        for pause_s in self._steps():
            self._sleep(pause_s)

    async def before_async(self) -> None:
        for pause_s in self._steps():
            await self._async_sleep(pause_s)

    def _steps(self) -> Iterator[float]:
        """The decision logic, shared by sync and async callers: yields pauses, may raise."""
        spec = self.store.get(self.stage)
        if spec is None or not spec.targets(self._rank_fn()):
            return
        if spec.kill and spec.kill_nonce:
            self._maybe_kill(spec.kill_nonce)
        if spec.hang:
            spec = yield from self._hang(spec)
            if spec is None or not spec.targets(self._rank_fn()):
                return
        if spec.latency_ms > 0:
            with self._lock:
                pause_s = sample_latency_s(spec, self._rng)
            if pause_s > 0:
                yield pause_s
        if spec.error_rate > 0:
            with self._lock:
                fail = self._rng.random() < spec.error_rate
            if fail:
                raise InjectedFault(f"injected fault in {self.stage} (error_rate={spec.error_rate})")

    def _hang(self, spec: FaultSpec) -> Iterator[float]:
        """Pause until the hang is lifted or max_hang_s passes; returns the spec then in force.

        Elapsed time is the sum of requested pauses, so a fake sleep drives it in tests."""
        waited, current = 0.0, spec
        while waited < spec.max_hang_s:
            pause_s = min(HANG_POLL_S, spec.max_hang_s - waited)
            yield pause_s
            waited += pause_s
            current = self.store.get(self.stage, fresh=True)
            if current is None or not current.hang:
                return current
        return current

    def _maybe_kill(self, nonce: str) -> None:
        with self._lock:
            if nonce in self._settled_nonces:
                return
            self._settled_nonces.add(nonce)
        if self._claim(nonce):
            log.warning("fault drill: killing this %s replica (nonce %s)", self.stage, nonce)
            self._exit()

    def _claim(self, nonce: str) -> bool:
        """Record the nonce before dying; True when no process had executed it yet.

        Recording first means a crash between the write and the exit loses one kill rather than
        risking a restart loop. The flock makes the check-and-append atomic across replicas, so one
        nonce kills exactly one replica of the stage."""
        with file_lock(self.store.killed_path(self.stage)) as ledger:
            ledger.seek(0)
            if nonce in ledger.read().split():
                return False
            ledger.write(nonce + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())
            return True


class NullInjector:
    """What a stage gets when fault injection is disabled by config: does nothing, reads nothing."""

    def before(self) -> None:
        return None

    async def before_async(self) -> None:
        return None


NO_FAULTS = NullInjector()
