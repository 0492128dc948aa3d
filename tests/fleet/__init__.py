"""Tests of several fleet processes on loopback together: admission, cancel and deadlines, conversations, router faults and failover, readiness, residency, two nodes, fuzzing, the soak smoke."""
