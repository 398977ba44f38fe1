"""How many CPUs this process may use: affinity capped by a cgroup quota (machine/cpus.py)."""

import os

from torchdoctor.machine.cpus import cgroup_cpu_quota, usable_cpus


def test_a_cgroup_quota_caps_the_cpus(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs of time per period
    assert cgroup_cpu_quota(tmp_path) == 1.5 and usable_cpus(tmp_path) == min(affinity, 2)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(tmp_path) is None and usable_cpus(tmp_path) == affinity


def test_cgroup_v1_and_no_cgroup(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_quota(tmp_path) == 1.0 and usable_cpus(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cgroup_cpu_quota(tmp_path) is None
    assert cgroup_cpu_quota(tmp_path / "missing") is None
