"""Tests of what deploy/ ships: compose, Kubernetes, Prometheus rules, Grafana dashboards against real data."""
