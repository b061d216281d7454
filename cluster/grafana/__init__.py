"""The Grafana dashboard over the gateway's Prometheus metrics (citadel.json) and its ConfigMap."""
