"""The reviewer page in a real browser: headless Chromium signs in once through
identity headers (as the organisation's portal would add them), keeps the session in an HttpOnly
cookie, sees the pending discount approval with its diff and evidence, is refused at 20% by the
limit, edits the term to 36 months and approves; the CRM then holds exactly one approval, for 36
months. Screenshots: var/review-page.png (the pending task) and var/review-page-approved.png."""

from __future__ import annotations

import time

import pytest

from serving.http.routers.review.session import COOKIE_NAME
from tests.integration.test_approvals_api import DANA, RUNNING_EXAMPLE, SAM

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_FINISH_TIMEOUT_S = 60


def _set_headers(driver, headers: dict) -> None:
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": headers})


def _edit(driver, approval_id: str, field: str, value) -> None:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, f"edit-{approval_id}-{field}")
    box.clear()
    box.send_keys(str(value))


def _click_decision(driver, approval_id: str, decision: str) -> None:
    from selenium.webdriver.common.by import By

    item = driver.find_element(By.ID, f"item-{approval_id}")
    item.find_element(By.CSS_SELECTOR, f'button[name="decision"][value="{decision}"]').click()


def _wait_for(driver, css: str, timeout_s: float = 15):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    located = expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    return WebDriverWait(driver, timeout_s).until(located)


def test_a_reviewer_edits_and_approves_in_a_real_browser(browser, live_deployment, clock, screenshots):
    from selenium.webdriver.common.by import By

    home, client, crm, url = live_deployment
    sam, dana = home.headers(**SAM, now=clock.now), home.headers(**DANA, now=clock.now)  # on the fake clock
    conversation = client.post("/v1/conversations", headers=sam).json()["conversation_id"]
    posted = client.post(f"/v1/conversations/{conversation}/messages", headers=sam, json={"content": RUNNING_EXAMPLE})
    assert posted.status_code == 202, posted.text
    run_id = posted.json()["run_id"]
    client.app.state.services.runs.wait_for_runs(RUN_FINISH_TIMEOUT_S)
    [pending] = client.get("/v1/approvals", headers=dana).json()["approvals"]
    approval_id = pending["approval_id"]

    # Sign in: the portal's identity headers on this one request only.
    _set_headers(browser, dana)
    browser.get(f"{url}/review")
    _wait_for(browser, f'[id="item-{approval_id}"]')
    _set_headers(browser, {})
    browser.refresh()  # no identity headers any more: the cookie alone carries the session
    item = _wait_for(browser, f'[id="item-{approval_id}"]')
    assert COOKIE_NAME not in browser.execute_script("return document.cookie")  # HttpOnly: no script sees it
    [cookie] = [c for c in browser.get_cookies() if c["name"] == COOKIE_NAME]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/review"
    assert "Bearer" not in browser.current_url and browser.current_url == f"{url}/review"

    # The task: its diff (proposed against the current record), its evidence, its decisions.
    assert "crm.create_discount_approval" in item.text
    rows = {row.get_attribute("data-field"): row for row in item.find_elements(By.CSS_SELECTOR, "table.diff tbody tr")}
    assert {"discount_pct", "term_months"} <= set(rows)
    assert rows["discount_pct"].find_element(By.CSS_SELECTOR, "td.proposed").text == "12"
    assert rows["term_months"].find_element(By.CSS_SELECTOR, "td.proposed").text == "24"
    evidence = item.find_elements(By.CSS_SELECTOR, ".evidence-line")
    assert len(evidence) == 2, item.text
    citations = [line.find_element(By.CSS_SELECTOR, "cite.citation").text for line in evidence]
    assert all(citations) and any("Discount Policy 2026" in c for c in citations), citations
    assert all(line.find_element(By.CSS_SELECTOR, "blockquote.quote").text for line in evidence)
    labels = [b.text for b in item.find_elements(By.CSS_SELECTOR, 'button[name="decision"]') if b.is_displayed()]
    assert labels == ["Approve", "Save edits and approve", "Reject"]
    browser.save_screenshot(str(screenshots / "review-page.png"))

    # 20% is over the reviewer's limit: refused, shown, nothing decided.
    _edit(browser, approval_id, "discount_pct", 20)
    _click_decision(browser, approval_id, "edit_and_approve")
    flash = _wait_for(browser, "#flash.error")
    assert "15" in flash.text, flash.text
    assert crm.count_approvals("northwind") == 0

    # The term to 36 months (the page shows the proposal again: 12%), then approve.
    assert browser.find_element(By.ID, f"edit-{approval_id}-discount_pct").get_attribute("value") == "12"
    _edit(browser, approval_id, "term_months", 36)
    _click_decision(browser, approval_id, "edit_and_approve")
    flash = _wait_for(browser, "#flash.ok")
    assert "Your edits were saved and the request approved." in flash.text
    assert browser.find_element(By.ID, "empty").text == "Nothing waiting for you."
    assert "?result=edit_and_approve" in browser.current_url
    browser.save_screenshot(str(screenshots / "review-page-approved.png"))

    # The run resumes and the CRM holds one approval, for 36 months.
    client.app.state.services.runs.wait_for_runs(RUN_FINISH_TIMEOUT_S)
    deadline = time.monotonic() + RUN_FINISH_TIMEOUT_S
    while client.get(f"/v1/runs/{run_id}", headers=sam).json()["status"] != "succeeded":
        assert time.monotonic() < deadline, "the approved run never finished"
        time.sleep(0.1)
    assert crm.count_approvals("northwind") == 1
    [record] = crm.list_approvals("northwind", "acme")
    assert record.term_months == 36 and record.discount_pct == 12 and record.requested_by == "sam"
    assert (screenshots / "review-page.png").stat().st_size > 0
    assert (screenshots / "review-page-approved.png").stat().st_size > 0
