"""The memory this process may still take: the least of the machine's, the cgroup's and the
address-space limit's."""

import resource

from torchdoctor.machine.memory import available_memory_bytes


def test_the_least_of_machine_cgroup_and_address_space_limit(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n")
    cgroup = tmp_path / "cg"
    cgroup.mkdir()
    status = tmp_path / "status"
    status.write_text("Name: python\nVmSize: 100000 kB\n")
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert available_memory_bytes(cgroup, meminfo, status) == 4_000_000 * 1024  # no cgroup file, no limit
    (cgroup / "memory.max").write_text("2000000000\n")
    (cgroup / "memory.current").write_text("500000000\n")
    assert available_memory_bytes(cgroup, meminfo, status) == 1_500_000_000
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1 << 30, resource.RLIM_INFINITY))  # ulimit -v 1 GiB
    assert available_memory_bytes(cgroup, meminfo, status) == (1 << 30) - 100_000 * 1024
    (cgroup / "memory.max").write_text("max\n")
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert available_memory_bytes(cgroup, meminfo, status) == 4_000_000 * 1024
    assert available_memory_bytes(cgroup, tmp_path / "none", tmp_path / "none") is None
