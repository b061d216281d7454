"""Reviewer honeypots (DESIGN.md §10): about 1 in 100 approval tasks is a deliberately
wrong request, to measure whether reviews are real.

Right after a run requests a real approval, the orchestrator asks `HoneypotPlanter.maybe_plant(real,
spec)`; with probability `rate` it gets back a NEW pending approval to store (`ApprovalStore.request`)
next to the real one: the same tenant, tool, requester, approver and lead groups and deadlines (so it
escalates and expires like the real one), `honeypot=True`, a synthetic run (`honeypot:<uuid4 hex>`,
no run behind it) and the real step's id, and proposed arguments that are wrong on purpose but still
satisfy the tool's argument schema, so they look like any other request. Deciding it runs nothing
(serving/services/approvals.py): approving it tells the reviewer at once and is recorded as a miss,
rejecting it is a catch.

How the wrong arguments are built, from the tool's policy, first rule that applies:

1. **Decoy account** — when `decoy_accounts` are configured (customers who fail a policy rule, e.g.
   Globex, a customer for less than the 2 years the multi-year discount needs) and the tool takes an
   `account_id`: with probability `decoy_share`, the real arguments with `account_id` replaced by a
   decoy (a seeded choice among the decoys other than the real account that the schema accepts).
   Nothing else changes: the request is wrong in exactly one way, the customer.
2. **Over the limit** — a numeric argument with an `approver_limit` (a seeded choice when there are
   several) set above it: limit + a seeded 3..10 (an integer limit stays an integer, e.g. 15 → 22);
   when the schema refuses that value (a `maximum`, a `multipleOf`), smaller bumps, then larger ones
   up to 10, then the schema's `maximum`, the first the schema accepts; above the limit in every case. An argument whose schema leaves no room above the limit is
   skipped.
3. **Schema extreme** — a tool without a usable limit: a numeric argument that declares a `maximum`
   (a seeded choice) set to that maximum, where the real request asked for less (e.g. a 120-month
   term). This is the weakest form, a value nobody should approve without a second look.

When no rule applies, nothing is planted (`None`): a correct request planted as a honeypot would turn
a right approval into a "miss".

Randomness: every draw for one real approval comes from its own `random.Random` seeded with
(planter seed, tenant, approval id). So the planter holds no shared mutable state (thread-safe with
no lock); with a seed the same approvals get the same honeypots whatever the order or the thread or
process they are planted from; and asking again for the same approval (a run resumed after a crash)
gives the same answer and the same synthetic run id, which the store's idempotency on
(run_id, step_id) turns into the same stored honeypot. The rate is one `random() < rate` per
approval: rate 0 never plants, rate 1 always tries. Without a seed, a random one is drawn per planter.
"""

from __future__ import annotations

import math
import random
import secrets
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from citadel.tools.approvals import Approval, ApprovalStatus
from citadel.tools.schema import validator_for
from citadel.tools.spec import ToolSpec

if TYPE_CHECKING:
    from citadel.config import ToolsConfig

# A honeypot's run id; there is no run behind it. Shown to reviewers without the prefix
# (`shown_run_id`), so it reads like any run id (a uuid4 hex).
HONEYPOT_RUN_PREFIX = "honeypot:"
# The argument a decoy account replaces.
ACCOUNT_ARG = "account_id"
DEFAULT_DECOY_SHARE = 0.5
# How far above the limit an over-the-limit honeypot goes: limit + a seeded bump in this range.
BUMP_MIN, BUMP_MAX = 3, 10
MAX_DECOYS = 1_000
MAX_DECOY_CHARS = 256


def _share(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:  # refuses NaN
        raise ValueError(f"{field} is a share from 0 to 1, got {value!r}")
    return float(value)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _numeric(declared: object) -> bool:
    return isinstance(declared, Mapping) and declared.get("type") in ("number", "integer")


def is_honeypot_run(run_id: str) -> bool:
    return run_id.startswith(HONEYPOT_RUN_PREFIX)


def shown_run_id(approval: Approval) -> str:
    """The run id a reviewer sees: a honeypot's without its prefix, so it looks like any other."""
    return approval.run_id.removeprefix(HONEYPOT_RUN_PREFIX) if approval.honeypot else approval.run_id


class HoneypotPlanter:
    """Plants a deliberately wrong twin of a real approval with probability `rate` (see the module)."""

    def __init__(self, rate: float, seed: int | None = None, decoy_accounts: Sequence[str] = (),
                 decoy_share: float = DEFAULT_DECOY_SHARE):
        self.rate = _share(rate, "rate")
        self.decoy_share = _share(decoy_share, "decoy_share")
        if isinstance(decoy_accounts, str):
            raise ValueError("decoy_accounts is a list of account ids, not one string")
        decoys = tuple(dict.fromkeys(decoy_accounts))  # order kept, duplicates dropped
        if len(decoys) > MAX_DECOYS or not all(isinstance(d, str) and 0 < len(d) <= MAX_DECOY_CHARS
                                                and d.isprintable() for d in decoys):
            raise ValueError(f"decoy_accounts holds at most {MAX_DECOYS} non-empty printable account ids "
                             f"of at most {MAX_DECOY_CHARS} characters")
        self.decoy_accounts = decoys
        # Only the seed is kept: each approval's draws come from a generator of its own (thread-safe).
        self._seed = seed if seed is not None else secrets.randbits(128)

    @classmethod
    def from_config(cls, tools: ToolsConfig) -> HoneypotPlanter:
        """The planter `tools` (the config section) describes: honeypot_rate, _seed, _decoy_accounts."""
        return cls(tools.honeypot_rate, tools.honeypot_seed, tools.honeypot_decoy_accounts)

    def maybe_plant(self, real: Approval, spec: ToolSpec) -> Approval | None:
        """A new pending honeypot approval to store next to `real` (already stored: it has its id),
        with probability `rate`; None otherwise, and when the tool offers no way to be wrong."""
        if real.honeypot:
            return None  # never a honeypot of a honeypot
        if not real.approval_id:
            raise ValueError("plant next to a stored approval: the real one needs its approval_id")
        if spec.name != real.tool:
            raise ValueError(f"the spec is {spec.name!r}, the approval is for {real.tool!r}")
        draws = self._draws(real)
        if not draws.random() < self.rate:
            return None
        run_id = HONEYPOT_RUN_PREFIX + uuid.UUID(int=draws.getrandbits(128), version=4).hex
        wrong = self.wrong_args(dict(real.proposed_args), spec, draws)
        if wrong is None:
            return None
        return replace(real, approval_id="", run_id=run_id, proposed_args=wrong, honeypot=True,
                       status=ApprovalStatus.PENDING, escalated=False, final_args=None, decided_by=None,
                       decided_at=None, comment="", created_at=0.0)

    def _draws(self, real: Approval) -> random.Random:
        # A str seed is hashed with SHA-512: the same on every process, whatever PYTHONHASHSEED says.
        return random.Random(f"{self._seed}:{real.tenant_id}:{real.approval_id}")

    # ------------------------------------------------------------------ the wrong arguments
    def wrong_args(self, proposed: dict[str, Any], spec: ToolSpec, draws: random.Random) -> dict[str, Any] | None:
        """`proposed` made wrong by the first rule of the module docstring that applies, valid under
        the tool's schema; None when none applies."""
        validator = validator_for(spec.args_schema)
        properties = spec.args_schema.get("properties", {})

        def valid(args: dict[str, Any]) -> bool:
            return validator.is_valid(args)

        if self.decoy_accounts and ACCOUNT_ARG in properties and draws.random() < self.decoy_share:
            current = proposed.get(ACCOUNT_ARG)
            decoys = [d for d in self.decoy_accounts if d != current and valid({**proposed, ACCOUNT_ARG: d})]
            if decoys:
                return {**proposed, ACCOUNT_ARG: draws.choice(decoys)}
        limited = sorted(name for name in spec.approver_limit if _numeric(properties.get(name)))
        draws.shuffle(limited)
        for name in limited:
            value = _over_limit(spec.approver_limit[name], properties[name], draws,
                                lambda v, name=name: valid({**proposed, name: v}))
            if value is not None:
                return {**proposed, name: value}
        extremes = sorted(name for name, declared in properties.items()
                          if _numeric(declared) and _number(declared.get("maximum")))
        draws.shuffle(extremes)
        for name in extremes:
            maximum, current = properties[name]["maximum"], proposed.get(name)
            if _number(current) and current >= maximum:
                continue  # already at the extreme: nothing wrong to add
            candidate = {**proposed, name: maximum}
            if valid(candidate):
                return candidate
        return None


def _over_limit(limit: float, declared: Mapping[str, Any], draws: random.Random,
                valid: Callable[[Any], bool]) -> int | float | None:
    """A value above `limit` that the schema accepts: limit + a seeded bump of BUMP_MIN..BUMP_MAX (an
    integral limit, or an integer argument, gives an integer), then smaller bumps, larger ones up to
    BUMP_MAX, and the schema's maximum; None when the schema leaves no room above the limit."""
    bump = draws.randint(BUMP_MIN, BUMP_MAX)
    whole = declared.get("type") == "integer" or float(limit).is_integer()
    base: int | float = math.floor(limit) if whole else limit  # floor(x) + 1 > x: still above
    steps = [*range(bump, 0, -1), *range(bump + 1, BUMP_MAX + 1)]  # the drawn bump, smaller, then larger
    candidates: list[int | float] = [base + step for step in steps]
    maximum = declared.get("maximum")
    if _number(maximum) and maximum > limit:
        candidates.append(maximum)
    for value in candidates:
        if value > limit and valid(value):
            return value
    return None
