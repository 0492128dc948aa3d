"""How many cores a service sizes itself for (services/common/scheduler.py cpu_cores): the cgroup's CPU quota bounds
the affinity (a container limited to 2 CPUs on a large node must not start a worker per node core)."""

from __future__ import annotations

from services.common import scheduler


def test_cgroup_v2_quota_in_cores(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert scheduler.cgroup_cpu_quota(str(tmp_path)) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert scheduler.cgroup_cpu_quota(str(tmp_path)) is None


def test_cgroup_v1_quota_in_cores_and_none_without_a_quota(tmp_path):
    assert scheduler.cgroup_cpu_quota(str(tmp_path)) is None
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert scheduler.cgroup_cpu_quota(str(tmp_path)) == 2.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert scheduler.cgroup_cpu_quota(str(tmp_path)) is None


def test_cores_are_the_affinity_bounded_by_the_quota_rounded_up(monkeypatch):
    monkeypatch.setattr(scheduler.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(scheduler, "cgroup_cpu_quota", lambda: 1.5)
    assert scheduler.cpu_cores() == 2
    monkeypatch.setattr(scheduler, "cgroup_cpu_quota", lambda: None)
    assert scheduler.cpu_cores() == 64
    monkeypatch.setattr(scheduler.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(scheduler, "cgroup_cpu_quota", lambda: 8.0)
    assert scheduler.cpu_cores() == 2
