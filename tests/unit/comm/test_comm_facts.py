"""The communication facts torchdoctor reads off a machine: nvidia-smi's topology matrix,
NCCL's INFO log, crippling settings, the expected bandwidth of a path and the verdict.
The fixtures are written from the documented formats, not recorded (tests/fixtures/comm/README.md)."""

from pathlib import Path

import pytest

from torchdoctor.comm import links
from torchdoctor.comm.bench import bus_bandwidth, size_row
from torchdoctor.model.units import parse_bytes
from torchdoctor.comm.environment import crippling_settings, is_wsl2
from torchdoctor.comm.nccl_log import parse_nccl_info
from torchdoctor.comm.topology import GpuTopology, parse_topo_matrix
from torchdoctor.comm.verdict import gloo_link, judge, nccl_link
from torchdoctor.model.distributed_record import CommResult, CommSize, LinkInfo

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "comm"


def read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_topology_matrix_of_two_gpus_across_numa_nodes():
    topo = parse_topo_matrix(read("nvidia_smi_topo_2gpu_sys.txt"))
    assert topo.gpus == ["GPU0", "GPU1"]
    assert topo.level(0, 1) == topo.level(1, 0) == "SYS"
    assert topo.numa == {"GPU0": "0", "GPU1": "1"}


def test_topology_matrix_with_ansi_headers_nvlink_and_nic_columns():
    topo = parse_topo_matrix(read("nvidia_smi_topo_4gpu_nvlink_ansi.txt"))
    assert topo.gpus == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert topo.worst_level([0, 1, 2, 3]) == "NV18"
    assert not any("NIC" in key for key in topo.levels)  # GPU pairs only
    assert topo.numa["GPU2"] == "1"


def test_the_farthest_pair_sets_the_level_of_a_ring():
    topo = GpuTopology(levels={"GPU0-GPU1": "PIX", "GPU0-GPU2": "SYS", "GPU1-GPU2": "NODE"})
    assert topo.worst_level([0, 1]) == "PIX"
    assert topo.worst_level([0, 1, 2]) == "SYS"


def test_output_without_a_matrix_says_so():
    assert parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate with the driver").note


@pytest.mark.parametrize("name, slowest, env", [
    ("nccl_info_wsl2_shm_disabled.txt", "NET/Socket", {"NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"}),
    ("nccl_info_p2p_nvlink.txt", "P2P", {}),
    ("nccl_info_sys_shm.txt", "SHM", {"NCCL_P2P_DISABLE": "1"}),
])
def test_the_transport_nccl_chose_is_its_slowest_connection(name, slowest, env):
    choice = parse_nccl_info(read(name))
    assert choice.slowest == slowest
    assert choice.env == env
    assert choice.version and choice.version[0] == "2"


def test_busbw_is_nccl_tests_definition():
    assert bus_bandwidth(10.0, 2) == pytest.approx(10.0)
    assert bus_bandwidth(10.0, 8) == pytest.approx(17.5)
    row = size_row(100 * 2**20, [0.1, 0.2, 0.1], world_size=4)
    assert row.algbw_gbps == pytest.approx(100 * 2**20 / 0.1 / 1e9, rel=1e-3)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 1.5, rel=1e-3)
    assert row.spread == pytest.approx(1.0)


def test_sizes_read_like_nccl_tests():
    assert [parse_bytes(s) for s in ("4M", "25M", "1G", "512K", "1000", "2MB")] == [
        4 * 2**20, 25 * 2**20, 2**30, 512 * 1024, 1000, 2 * 2**20]
    with pytest.raises(ValueError):
        parse_bytes("-3M")


def test_the_comm_commands_default_sizes_are_the_ones_that_matter():
    from torchdoctor.commands.comm import DEFAULT_SIZES

    assert [parse_bytes(s) for s in DEFAULT_SIZES.split(",")] == [4 * 2**20, 25 * 2**20, 40 * 2**20, 200 * 2**20, 2**30]


def test_nccl_link_model():
    assert links.pcie_gbps(3) == 12.0 and links.pcie_gbps(4) == 24.0 and links.pcie_gbps(5) == 48.0
    assert links.pcie_gbps(4, width=8) == 12.0
    assert links.gpu_path_gbps("SYS", 4) == 10.0  # PCIe Gen4 capped by the socket link
    assert links.gpu_path_gbps("PHB", 4) == 24.0
    assert links.gpu_path_gbps("NV4", None, capability=(8, 0)) == 80.0
    assert links.gpu_path_gbps("NV18", None, nvlinks=18, capability=(9, 0)) == pytest.approx(370.8)
    assert links.nic_gbps(100_000) == 12.5


def test_crippling_settings_and_wsl2(tmp_path):
    found = crippling_settings({"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "0", "NCCL_P2P_LEVEL": "loc",
                                "NCCL_DEBUG": "INFO"})
    assert found == {"NCCL_SHM_DISABLE": "1", "NCCL_P2P_LEVEL": "loc"}
    version = tmp_path / "version"
    version.write_text("Linux version 5.15.153.1-microsoft-standard-WSL2 (root@65c7) #1 SMP\n")
    assert is_wsl2(version, environ={})
    version.write_text("Linux version 6.8.0-45-generic (buildd@lcy02) #45-Ubuntu SMP\n")
    assert not is_wsl2(version, environ={}) and is_wsl2(version, environ={"WSL_DISTRO_NAME": "Ubuntu"})


def test_the_reference_report_machine_gets_a_slow_link_verdict_naming_its_cause():
    """Two RTX 4090s across NUMA nodes under WSL2 with NCCL_SHM_DISABLE=1: ~1 GB/s measured."""
    topo = parse_topo_matrix(read("nvidia_smi_topo_2gpu_sys.txt"))
    topo.pcie_generation = 4
    choice = parse_nccl_info(read("nccl_info_wsl2_shm_disabled.txt"))
    link = nccl_link(topo, [0, 1], choice, env={}, wsl2=True, same_host=True)
    assert link.kind == "pcie" and link.topology_level == "SYS" and link.transport == "NET/Socket"
    assert link.expected_gbps == 10.0
    assert link.crippling_env == {"NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"}
    result = CommResult(backend="nccl", world_size=2, link=link,
                        sizes=[size_row(40 * 2**20, [0.041, 0.042, 0.040], 2)])
    verdict = judge(result)
    assert verdict.slow and verdict.share < 0.15
    assert "NCCL_SHM_DISABLE=1" in verdict.text


def test_a_link_near_its_figure_is_not_slow():
    link = LinkInfo(kind="pcie", description="PCIe", expected_gbps=24.0)
    result = CommResult(backend="nccl", world_size=2, link=link, sizes=[size_row(25 * 2**20, [0.0013] * 3, 2)])
    assert not judge(result).slow


def test_gloo_on_one_host_is_judged_against_measured_loopback_with_its_own_threshold():
    link = gloo_link(same_host=True, loopback_gbps=2.0, nic_speed_mbit=None)
    assert link.kind == "loopback-tcp" and link.expected_gbps == 2.0
    ordinary = CommResult(backend="gloo", world_size=2, link=link, sizes=[CommSize(25 * 2**20, busbw_gbps=1.1)])
    crawling = CommResult(backend="gloo", world_size=2, link=link, sizes=[CommSize(25 * 2**20, busbw_gbps=0.2)])
    assert not judge(ordinary).slow  # gloo reaches about 0.55 of raw loopback here
    assert judge(crawling).slow


def test_no_expected_figure_gives_no_verdict():
    result = CommResult(backend="gloo", world_size=2, link=gloo_link(False, None, None),
                        sizes=[CommSize(25 * 2**20, busbw_gbps=0.2)])
    verdict = judge(result)
    assert not verdict.slow and "no expected figure" in verdict.text


@pytest.mark.gpu
def test_nvml_reads_this_machines_topology():
    import torch

    from torchdoctor.comm.topology import nvml_topology, read_nvidia_smi_topology

    gpus = list(range(torch.cuda.device_count()))
    topo = nvml_topology(gpus)
    assert topo.pcie_generation is not None and topo.pcie_width
    if len(gpus) > 1:
        assert topo.worst_level(gpus) is not None
        assert read_nvidia_smi_topology().gpus[: len(gpus)] == [f"GPU{i}" for i in gpus]


def test_the_topology_asks_nvml_through_the_one_door():
    """comm/topology.py once called nvmlInit/nvmlShutdown itself; now machine/nvml.py opens and
    closes the session, and a call the driver refuses stays unknown."""
    from types import SimpleNamespace

    from torchdoctor.comm.topology import nvml_topology

    calls = []

    def refused(*args):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    fake = SimpleNamespace(
        nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}", nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 4,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16, nvmlDeviceGetCudaComputeCapability=refused,
        nvmlDeviceGetNvLinkState=lambda h, link: 0, NVML_NVLINK_MAX_LINKS=2,
        nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 30)
    topo = nvml_topology([0, 1], nvml=fake)
    assert (topo.pcie_generation, topo.pcie_width, topo.capability) == (4, 16, None)
    assert topo.levels == {"GPU0-GPU1": "PHB"} and calls == ["init", "shutdown"]

    def no_driver():
        raise RuntimeError("Driver Not Loaded")

    broken = nvml_topology([0, 1], nvml=SimpleNamespace(nvmlInit=no_driver))
    assert broken.gpus == [] and "NVML" in broken.note


def test_a_median_below_the_threshold_with_a_repeat_above_it_is_a_busy_machine_not_a_slow_path():
    """A loopback all-reduce measured 0.92 GB/s (median) against 3.9 of raw TCP on a shared VM whose pace
    moved: one repeat at full speed shows what the path carries; only all repeats slow make it slow."""
    link = gloo_link(same_host=True, loopback_gbps=4.0, nic_speed_mbit=None)
    nbytes = 25 * 2**20
    busy = CommResult(backend="gloo", world_size=2, link=link, sizes=[size_row(nbytes, [0.060, 0.058, 0.021], 2)])
    verdict = judge(busy)
    assert verdict.share < 0.25 and not verdict.slow
    assert "its fastest repeat reached 1.25 GB/s (31%)" in verdict.text
    crawling = CommResult(backend="gloo", world_size=2, link=link, sizes=[size_row(nbytes, [0.060, 0.058, 0.061], 2)])
    assert judge(crawling).slow
