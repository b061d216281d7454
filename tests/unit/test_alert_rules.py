"""The alert rules in cluster/prometheus/: valid for Prometheus (`promtool check
rules`), each alert firing on the series its cases build and quiet otherwise (`promtool test rules`),
and every metric they read one the API exposes. promtool is Debian's `prometheus` package: `.ci/run`
installs it and sets CITADEL_REQUIRE_PROMTOOL=1, so CI fails rather than skips without it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.required import missing
import yaml

RULES = Path(__file__).resolve().parents[2] / "cluster" / "prometheus"
PROMTOOL = shutil.which("promtool")


def promtool(*args: str) -> subprocess.CompletedProcess:
    if PROMTOOL is None:
        missing("PROMTOOL", "promtool is not installed (Debian package prometheus; .ci/run installs it)",
                "the alert rules are not checked")
    return subprocess.run([PROMTOOL, *args], cwd=RULES, capture_output=True, text=True, timeout=120)


def test_the_rules_are_valid_prometheus_rules():
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_each_alert_fires_on_its_case_and_stays_quiet_otherwise():
    tested = promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_case():
    rules = yaml.safe_load((RULES / "alerts.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    cases = yaml.safe_load((RULES / "alerts_test.yml").read_text())
    tested = {t["alertname"] for case in cases["tests"] for t in case.get("alert_rule_test", [])}
    assert alerts == tested


def test_the_rules_read_only_metrics_the_api_exposes(tmp_path):
    from serving.services.metrics import ApiMetrics

    metrics = ApiMetrics()
    metrics.count_request("answer", "acme", 200, 0.1)
    metrics.charged("acme", "sam", 0.01)
    exposed = metrics.render().decode()
    text = (RULES / "alerts.yml").read_text()
    used = set(re.findall(r"\b(citadel_[a-z_]+)", text))
    for name in sorted(used):
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        assert re.search(rf"^# TYPE ({name}|{base}) ", exposed, re.MULTILINE), f"{name} is not exposed"


class _Catalog:
    def __init__(self, letters):
        self.letters = letters

    def dead_letters(self, tenant_id=None, include_retried=False):
        if self.letters is None:
            raise OSError("catalog gone")
        return self.letters


def test_dead_letters_spend_and_latency_are_reported_as_the_rules_read_them():
    from serving.services.metrics import ApiMetrics

    metrics = ApiMetrics()
    metrics.watch_dead_letters(_Catalog([{"tenant_id": "acme"}, {"tenant_id": "acme"}, {"tenant_id": "globex"}]))
    metrics.watch_dead_letters(_Catalog(None))  # an unreadable catalog reports nothing, the scrape goes on
    metrics.charged("acme", "sam", 0.25)
    metrics.charged("acme", "sam", 0.5)
    metrics.count_request("answer", "acme", 503, 3.0)
    exposed = metrics.render().decode()
    assert 'citadel_dead_letters{tenant="acme"} 2.0' in exposed
    assert 'citadel_dead_letters{tenant="globex"} 1.0' in exposed
    assert 'citadel_spend_usd_total{tenant="acme",user="sam"} 0.75' in exposed
    assert 'citadel_request_seconds_bucket{endpoint="answer",le="2.5"} 0.0' in exposed
    assert 'citadel_request_seconds_count{endpoint="answer"} 1.0' in exposed
