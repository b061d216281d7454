"""Who the virtual users are: tenants and users drawn from Zipf distributions, and the user context
each virtual user presents, minted from the calling service's signing key.

A few tenants carry most of the traffic and, within a tenant, a few users ask most of the questions
(rank k is drawn with probability proportional to 1 / k**s). Draws are seeded, so a run's population
can be repeated. The user context is the JWT a calling service mints for its signed-in user
(claims `tenant`, `sub`, `groups`, `iat`, `exp`, `aud`, `svc`; HS256 under the key's `kid`): this
package speaks HTTP only and imports no project package, so it mints with PyJWT from the key material
handed to it (`LoadSettings`).
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jwt

SETTINGS_ENV = "CITADEL_LOAD_SETTINGS"  # path of the settings JSON the runner writes (0600)
DEFAULT_ZIPF_S = 1.1
DEFAULT_USERS_PER_TENANT = 500
CONTEXT_TTL_S = 300  # under the deployment's max user-context lifetime (identity.max_ttl_s, 900 by default)


@dataclass(frozen=True)
class TenantSpec:
    tenant: str
    group_sets: list[list[str]]  # user k holds group_sets[k % len]
    questions: list[str]


# The example tenants (examples/acme, examples/northwind), what `citadel demo` and a local `citadel up`
# serve; a deployment with other tenants passes its own workload file.
DEFAULT_TENANTS = [
    TenantSpec("acme", [["staff"], ["staff", "exec"]], [
        "What is the hotel limit per night?", "What is the hotel limit per night in London?",
        "How much is reimbursed for home office equipment?", "How many days per week can staff work remotely?",
        "What is the meal allowance on business trips?", "Who approves travel outside the country?"]),
    TenantSpec("northwind", [["sales"], ["finance"]], [
        "What standard discount can sales offer?", "Who is eligible for the multi-year discount?",
        "What is the target gross margin on hardware bundles?", "How long is the standard contract term?"]),
]


@dataclass
class Workload:
    tenants: list[TenantSpec] = field(default_factory=lambda: list(DEFAULT_TENANTS))
    tenant_zipf_s: float = DEFAULT_ZIPF_S
    user_zipf_s: float = DEFAULT_ZIPF_S
    users_per_tenant: int = DEFAULT_USERS_PER_TENANT

    @classmethod
    def from_dict(cls, data: dict) -> "Workload":
        tenants = [TenantSpec(t["tenant"], [list(g) for g in t.get("group_sets", [[]])], list(t["questions"]))
                   for t in data.get("tenants", [])]
        workload = cls(tenants=tenants or list(DEFAULT_TENANTS),
                       tenant_zipf_s=float(data.get("tenant_zipf_s", DEFAULT_ZIPF_S)),
                       user_zipf_s=float(data.get("user_zipf_s", DEFAULT_ZIPF_S)),
                       users_per_tenant=int(data.get("users_per_tenant", DEFAULT_USERS_PER_TENANT)))
        if any(not t.questions or not t.group_sets for t in workload.tenants) or workload.users_per_tenant < 1:
            raise ValueError("every tenant needs questions and group sets, and users_per_tenant >= 1")
        return workload


@dataclass
class LoadSettings:
    """Everything a load run needs to act as a calling service: its bearer token, the HS256 key it
    signs user contexts with (kid, hex secret, service id) and the audience; an admin token for the
    upload workload (without one, no uploads run)."""

    url: str
    service: str
    service_token: str
    kid: str
    secret_hex: str
    audience: str = "citadel"
    admin_token: str | None = None
    workload: Workload = field(default_factory=Workload)
    seed: int = 0
    run_wait_s: float = 60.0  # how long an agentic run's events are followed before it counts as failed
    context_ttl_s: int = CONTEXT_TTL_S

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "LoadSettings":
        data = json.loads(text)
        data["workload"] = Workload.from_dict(data.get("workload") or {})
        return cls(**data)

    @classmethod
    def from_env(cls) -> "LoadSettings":
        path = os.environ.get(SETTINGS_ENV)
        if not path:
            raise RuntimeError(f"{SETTINGS_ENV} is not set: run the locustfile through loadtests.run_load "
                               "or `citadel load`")
        return cls.from_json(Path(path).read_text())


def zipf_weights(n: int, s: float) -> list[float]:
    """Probabilities of ranks 1..n under Zipf's law with exponent s (they sum to 1)."""
    if n < 1 or s < 0:
        raise ValueError("need n >= 1 and s >= 0")
    raw = [1.0 / (k ** s) for k in range(1, n + 1)]
    total = sum(raw)
    return [w / total for w in raw]


class ZipfSampler:
    """Draws ranks 0..n-1 (0 the most frequent) with Zipf weights from a seeded generator."""

    def __init__(self, n: int, s: float, rng: random.Random):
        self._cumulative = list(itertools.accumulate(zipf_weights(n, s)))
        self._rng = rng

    def draw(self) -> int:
        return min(len(self._cumulative) - 1, bisect.bisect_right(self._cumulative, self._rng.random()))


@dataclass(frozen=True)
class Identity:
    tenant: str
    user: str
    groups: tuple[str, ...]
    questions: tuple[str, ...]


class Population:
    """Draws a virtual user's identity: a tenant by Zipf rank, then a user of that tenant by Zipf rank."""

    def __init__(self, workload: Workload, seed: int):
        self.workload = workload
        self.rng = random.Random(seed)
        self._tenants = ZipfSampler(len(workload.tenants), workload.tenant_zipf_s, self.rng)
        self._users = ZipfSampler(workload.users_per_tenant, workload.user_zipf_s, self.rng)

    def draw(self) -> Identity:
        spec = self.tenant_spec()
        rank = self._users.draw()
        groups = spec.group_sets[rank % len(spec.group_sets)]
        return Identity(spec.tenant, f"load-user-{rank:05d}", tuple(groups), tuple(spec.questions))

    def tenant_spec(self) -> TenantSpec:
        return self.workload.tenants[self._tenants.draw()]


def mint_user_context(settings: LoadSettings, identity: Identity, now: float, ttl_s: int | None = None) -> str:
    """The JWT `settings.service` would mint for `identity` (what citadel's verifier accepts from it)."""
    iat = int(now)
    claims = {"tenant": identity.tenant, "sub": identity.user, "groups": sorted(set(identity.groups)), "iat": iat,
              "exp": iat + int(ttl_s or settings.context_ttl_s), "aud": settings.audience, "svc": settings.service}
    return jwt.encode(claims, bytes.fromhex(settings.secret_hex), algorithm="HS256", headers={"kid": settings.kid})
