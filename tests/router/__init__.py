"""Tests of the router's own rules (services/router) in process: health and ejection, the streaming-text failover log."""
