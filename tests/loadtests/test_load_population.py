"""Who the virtual users are (loadtests/population.py): seeded, skewed Zipf draws of tenants and users,
and user contexts that citadel's own verifier accepts."""

from __future__ import annotations

import collections
import random

import pytest

from loadtests.population import (Identity, LoadSettings, Population, TenantSpec, Workload, ZipfSampler,
                                  mint_user_context, zipf_weights)


def test_zipf_weights_fall_with_rank_and_sum_to_one():
    weights = zipf_weights(5, 1.0)
    assert sum(weights) == pytest.approx(1.0)
    assert weights[0] == pytest.approx(2 * weights[1]) == pytest.approx(5 * weights[4])
    assert zipf_weights(3, 0.0) == pytest.approx([1 / 3] * 3)


def test_zipf_draws_are_seeded_and_skewed():
    first = [ZipfSampler(100, 1.1, random.Random(7)) for _ in range(2)]
    assert [first[0].draw() for _ in range(50)] == [first[1].draw() for _ in range(50)]
    sampler = ZipfSampler(100, 1.1, random.Random(1))
    counts = collections.Counter(sampler.draw() for _ in range(20_000))
    assert all(0 <= rank < 100 for rank in counts)
    assert counts[0] > counts[1] > counts[9] > counts.get(90, 0)
    assert counts[0] / 20_000 == pytest.approx(zipf_weights(100, 1.1)[0], abs=0.02)
    assert sum(counts[k] for k in range(10)) > 0.5 * 20_000  # the top tenth of users ask most


def test_population_draws_tenants_by_rank_with_their_groups():
    workload = Workload(tenants=[TenantSpec("big", [["a"], ["a", "b"]], ["q1"]), TenantSpec("small", [["c"]], ["q2"])],
                        users_per_tenant=50)
    identities = [Population(workload, seed).draw() for seed in range(2000)]
    tenants = collections.Counter(i.tenant for i in identities)
    assert tenants["big"] > 1.5 * tenants["small"] > 0
    assert all(i.groups in (("a",), ("a", "b")) for i in identities if i.tenant == "big")
    assert Population(workload, 5).draw() == Population(workload, 5).draw()


def test_workload_from_a_dict_and_settings_round_trip():
    workload = Workload.from_dict({"tenants": [{"tenant": "acme", "group_sets": [["staff"]], "questions": ["hi?"]}],
                                   "users_per_tenant": 3})
    settings = LoadSettings("http://127.0.0.1:1", "app", "tok", "hs-1", "00" * 32, workload=workload, seed=3)
    assert LoadSettings.from_json(settings.to_json()) == settings
    with pytest.raises(ValueError):
        Workload.from_dict({"tenants": [{"tenant": "acme", "group_sets": [["staff"]], "questions": []}]})


def test_a_minted_context_verifies_with_citadels_verifier(tmp_path):
    from citadel.identity.context import UserContextVerifier
    from citadel.identity.credentials import ServiceIdentity
    from citadel.identity.keys import KeyRing, current_service_key

    path = tmp_path / "service_keys.json"
    key = current_service_key(path, "app", create=True)
    settings = LoadSettings("http://127.0.0.1:1", "app", "tok", key.kid, key.secret, audience="citadel")
    token = mint_user_context(settings, Identity("acme", "load-user-00001", ("staff", "exec"), ("q",)), 1_000_000)
    ring = KeyRing(path)
    verifier = UserContextVerifier(ring, "citadel", 900, 30, clock=lambda: 1_000_010)
    caller = ServiceIdentity("app")
    principal = verifier.verify(token, caller)
    assert (principal.tenant_id, principal.user_id, principal.groups) == ("acme", "load-user-00001",
                                                                         frozenset({"staff", "exec"}))
