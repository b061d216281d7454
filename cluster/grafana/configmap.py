"""The Grafana dashboard (cluster/grafana/citadel.json) as the ConfigMap the KubeRay manifests provision
(cluster/kuberay/grafana-dashboard.yaml): `python -m cluster.grafana.configmap` rewrites it after the
dashboard changes; tests/unit/test_grafana_dashboard.py checks that the two agree."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
DASHBOARD = HERE / "citadel.json"
CONFIGMAP = HERE.parent / "kuberay" / "grafana-dashboard.yaml"
HEADER = """\
# Citadel's Grafana dashboard (cluster/grafana/citadel.json, verbatim; regenerate with
# `python -m cluster.grafana.configmap`) as a ConfigMap that Grafana's dashboard sidecar loads: the
# kube-prometheus-stack chart's Grafana watches ConfigMaps labelled grafana_dashboard="1".
# Prometheus scrapes the gateway's GET /metrics with a metrics credential (serving.metrics_tokens_sha256)
# and loads cluster/prometheus/alerts.yml, whose recording rules the SLO panels read.
#   kubectl apply -f cluster/kuberay/grafana-dashboard.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: citadel-grafana-dashboard
  labels:
    grafana_dashboard: "1"
data:
  citadel.json: |
"""


def render() -> str:
    """The ConfigMap's text for the dashboard as it is now."""
    dashboard = json.loads(DASHBOARD.read_text())
    body = json.dumps(dashboard, indent=2)
    return HEADER + "".join(f"    {line}\n" for line in body.splitlines())


def main() -> None:
    CONFIGMAP.write_text(render())


if __name__ == "__main__":
    main()
