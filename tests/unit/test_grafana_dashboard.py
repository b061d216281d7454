"""The Grafana dashboard (cluster/grafana/citadel.json): every query names metrics the app exports (read
from a live ApiMetrics registry, its scrape-time collectors fed) or the recording rules of
cluster/prometheus/alerts.yml, promtool accepts every expression, it shows what operators asked for,
and the KubeRay manifests provision it verbatim (cluster/kuberay/grafana-dashboard.yaml). promtool is
Debian's `prometheus` package (.ci/run installs it; skipped with a message without it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.required import missing

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "cluster" / "grafana" / "citadel.json"
RULES = REPO / "cluster" / "prometheus" / "alerts.yml"
METRIC_NAME = re.compile(r"\bcitadel[_:][A-Za-z0-9_:]*")
# What Grafana puts in place of the dashboard's variables, so promtool reads plain PromQL.
VARIABLES = {"$__rate_interval": "5m", "$tenant": ".*"}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every query, the tenant variable's included."""
    found = [(panel["title"], target["expr"]) for panel in dashboard()["panels"] if panel["type"] != "row"
             for target in panel["targets"]]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"${variable['name']}", variable["definition"]))
    return found


def recording_rules() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


class _Catalog:
    def dead_letters(self):
        return [{"tenant_id": "acme"}]

    def job_counts(self):
        return {"succeeded": 1}


class _Retriever:
    def stats(self):
        return {"requests": 10, "hedges": 1, "hedge_wins": 1, "retries": 0}


def exported_names() -> set[str]:
    """Every series name a gateway's registry exposes, its scrape-time collectors given something to
    report (a catalog, a remote retriever, an approval store)."""
    from citadel.resilience.breaker import BreakerState
    from serving.services.metrics import ApiMetrics

    metrics = ApiMetrics()
    metrics.watch_dead_letters(_Catalog())
    metrics.watch_retriever(_Retriever())
    metrics.watch_pending_approvals(lambda: {("crm.create_discount_approval", "approval"): 1})
    metrics.breaker_transition("catalog", BreakerState.CLOSED, BreakerState.OPEN, "slow")
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in HISTOGRAM_SUFFIXES)
        names.update(sample.name for sample in family.samples)
    return names


def test_every_query_reads_metrics_the_app_exports_or_the_alert_rules_record():
    known = exported_names() | recording_rules()
    for title, expr in queries():
        used = set(METRIC_NAME.findall(expr))
        assert used, f"{title}: {expr} names no citadel metric"
        assert used <= known, f"{title}: {sorted(used - known)} are neither exported nor recorded"


def test_the_dashboard_shows_what_operators_watch():
    used = {name for _, expr in queries() for name in METRIC_NAME.findall(expr)}
    assert {"citadel_requests_total", "citadel_request_seconds_bucket",  # rate, errors, latency per endpoint
            "citadel:request_errors:ratio_rate1h", "citadel:request_slow:ratio_rate6h",  # SLO burn rates
            "citadel_answers_total", "citadel_spend_usd_total", "citadel_runs_total",
            "citadel_approvals_pending", "citadel_approval_decision_seconds_bucket",
            "citadel_ingest_jobs", "citadel_dead_letters", "citadel_breaker_state",
            "citadel_retriever_hedges_total"} <= used
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert all(p["targets"] and p["datasource"]["uid"] == "${datasource}" for p in panels if p["type"] != "row")


def test_promtool_accepts_every_expression(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("PROMTOOL", "promtool is not installed (Debian package prometheus; .ci/run installs it)",
                "the dashboard's expressions are not checked")
    rules = [{"record": f"dashboard:query_{n}", "expr": _plain(expr)}
             for n, (_, expr) in enumerate(queries()) if not expr.startswith("label_values(")]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_kuberay_configmap_provisions_the_dashboard_verbatim():
    from cluster.grafana.configmap import CONFIGMAP, render

    assert CONFIGMAP.read_text() == render(), "run `python -m cluster.grafana.configmap`"
    configmap = yaml.safe_load(CONFIGMAP.read_text())
    assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["citadel.json"]) == dashboard()


def _plain(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"an unknown variable in {expr}"
    return expr


def test_the_catalog_counts_jobs_by_status(tmp_path):
    from citadel.catalog.sqlite import SQLiteCatalog

    catalog = SQLiteCatalog(tmp_path / "catalog.db")
    try:
        done, failed = catalog.create_job("acme", "ingest"), catalog.create_job("acme", "ingest")
        catalog.create_job("globex", "ingest")
        catalog.finish_job(done, "succeeded", {})
        catalog.finish_job(failed, "failed", {})
        counts = catalog.job_counts()
    finally:
        catalog.close()
    assert counts.pop("succeeded") == 1 and counts.pop("failed") == 1
    assert sum(counts.values()) == 1  # the third, still open, in whatever status a new job has
