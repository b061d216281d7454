"""Every stored answer names its config bundle (DESIGN.md §11); two answers from different configs name
different bundles, each kept in its home so `citadel bundle show/diff` can explain the difference."""

from __future__ import annotations

from citadel.quality.bundle import diff
from citadel.quality.bundle_store import BundleStore
from citadel.catalog.sqlite import SQLiteCatalog
from tests.integration.conftest import make_home
from tests.integration.test_api import client_for

QUESTION = {"question": "What is the hotel limit per night in London?"}


def _answer(home) -> dict:
    with client_for(home) as client:
        response = client.post("/v1/answer", json=QUESTION, headers=home.headers())
        again = client.post("/v1/answer", json=QUESTION, headers=home.headers())  # from the cache
        client.app.state.services.admin.wait_for_jobs(30)
    assert response.status_code == again.status_code == 200, response.text
    body = response.json()
    assert again.json()["cached"] is True and again.json()["bundle_id"] == body["bundle_id"]
    return body


def _logged(home) -> list[dict]:
    catalog = SQLiteCatalog(home.config.catalog_path)
    try:
        return catalog.answer_log("acme")
    finally:
        catalog.close()


def test_every_stored_answer_names_its_bundle_and_configs_differ(tmp_path):
    plain = make_home(tmp_path / "plain")
    stricter = make_home(tmp_path / "stricter", CITADEL_ANSWER__MIN_COVERAGE="0.65")
    first, second = _answer(plain), _answer(stricter)
    assert first["bundle_id"].startswith("b-") and second["bundle_id"].startswith("b-")
    assert first["bundle_id"] != second["bundle_id"]
    for home, body in ((plain, first), (stricter, second)):
        rows = _logged(home)
        assert len(rows) == 2 and {row["response"]["bundle_id"] for row in rows} == {body["bundle_id"]}
    kept_first = BundleStore.for_home(plain.config.home).load(first["bundle_id"])
    kept_second = BundleStore.for_home(stricter.config.home).load(second["bundle_id"])
    assert [c.key for c in diff(kept_first, kept_second)] == ["answer.min_coverage"]
