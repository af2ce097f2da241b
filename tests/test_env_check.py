"""The recipe check against the constructed GB300 / H100 / B200 captures and the shared recipes."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from oomkit.env import check_recipe, load_recipe, load_snapshot_from_dir, take_snapshot
from oomkit.env.recipe import read_prose
from oomkit.errors import InputError, UsageError

FIXTURES = Path(__file__).parent / "fixtures" / "env"
RECIPES = Path(__file__).resolve().parent / "fixtures" / "recipes"
K3 = RECIPES / "moonshotai--Kimi-K3.yaml"
LINEAR = RECIPES / "moonshotai--Kimi-Linear-48B-A3B-Instruct.yaml"
pytestmark = pytest.mark.skipif(not K3.exists(), reason=f"shared recipes not found at {RECIPES}")


def snap(name: str):
    return load_snapshot_from_dir(FIXTURES / name)


def rows_by_status(report) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"pass": set(), "fail": set(), "unknown": set()}
    for row in report.rows:
        out[row.status].add(row.requirement)
    return out


def test_every_shared_recipe_loads():
    files = sorted(RECIPES.glob("*.yaml"))
    assert len(files) >= 7
    for f in files:
        rec = load_recipe(f)
        assert rec.model.model_id and rec.strategies(), f.name


def test_k3_prose_requirements():
    facts = read_prose(load_recipe(K3))
    assert facts.driver_min == 580 and facts.cuda_build == (13, "cu130")
    assert facts.all2all == {"rdma": "deepep_v2", "nvlink": "flashinfer_nvlink_one_sided"}
    assert "r580+" in facts.quotes["driver_min"]


def test_k3_passes_gb300_single_node_tp():
    report = check_recipe(K3, snap("gb300-8x-r580"), strategy="single_node_tp")
    assert report.overall == "pass", [r for r in report.rows if r.status != "pass"]
    assert report.hardware == "gb300" and len(report.rows) >= 10
    got = {r.requirement: r.found for r in report.rows}
    assert got["NVIDIA driver >= r580"] == "580.82.07"
    assert got["GPU memory >= 1680 GB (variant default)"] == "8 x 298.0 GB = 2384 GB"
    assert "--kv-cache-dtype" in report.args and report.env["VLLM_USE_V2_MODEL_RUNNER"] == "1"


def test_k3_fails_h100_on_driver_and_cuda():
    report = check_recipe(K3, snap("h100-8x-r575"), strategy="single_node_tp")
    failed = rows_by_status(report)["fail"]
    assert report.overall == "fail"
    assert {"NVIDIA driver >= r580", "CUDA 13 build (cu130)"} <= failed
    assert ">= 32 GPUs" in failed  # strategy_min_gpus.h100 raises the floor from 8
    assert any(
        r.requirement.startswith("no exported value") and "VLLM_ENGINE_READY_TIMEOUT_S=600" in r.found
        for r in report.rows
        if r.status == "fail"
    )
    # the driver row failing is about the driver, not the build's own CUDA: cu129 on a 12.9 driver is fine
    assert "driver supports CUDA 12.9 (the build's)" in rows_by_status(report)["pass"]


def test_k3_fails_b200_on_capacity_only():
    report = check_recipe(K3, snap("b200-8x-r580"), strategy="single_node_tp")
    by = rows_by_status(report)
    assert by["fail"] == {"GPU memory >= 1680 GB (variant default)"} and not by["unknown"]
    row = next(r for r in report.rows if r.status == "fail")
    assert "1538 GB" in row.found and "short by 142 GB" in row.why


def test_b200_holds_k3_across_two_nodes_with_tp_pp():
    report = check_recipe(K3, snap("b200-8x-r580"), strategy="multi_node_tp_pp")
    by = rows_by_status(report)
    assert not by["fail"]
    assert by["unknown"] == {"2 nodes like this one"}  # the other node is not seen: never a pass
    assert report.overall == "unknown"
    got = {r.requirement: r.found for r in report.rows}
    assert got["RDMA or a multi-node NVLink domain"].startswith("RDMA: 8 active (InfiniBand)")
    assert "--gpu-memory-utilization" in report.args
    assert report.args[report.args.index("--gpu-memory-utilization") + 1] == "0.90"


def test_unknown_is_never_a_pass_without_gpus():
    live = take_snapshot(run_smi=lambda a: (None, "nvidia-smi is not on PATH"), nvml=object())
    report = check_recipe(K3, live, hardware="gb300")
    by = rows_by_status(report)
    assert report.overall != "pass"
    assert {"NVIDIA driver >= r580", ">= 8 GPUs", "GPU memory >= 1680 GB (variant default)"} <= by["unknown"]
    assert any(
        r.requirement.startswith("GPU among verified") and "--hardware gb300 named" in r.found
        for r in report.rows
        if r.status == "unknown"
    )


def test_strategy_hardware_grants_and_bans():
    assert rows_by_status(check_recipe(K3, snap("h100-8x-r575"), strategy="multi_node_dep"))["fail"] >= {
        "multi_node_dep supported on this hardware"
    }
    gb300 = check_recipe(K3, snap("gb300-8x-r580"), strategy="multi_node_tp_dp")
    assert "multi_node_tp_dp supported on this hardware" in rows_by_status(gb300)["pass"]
    b200 = check_recipe(K3, snap("b200-8x-r580"), strategy="multi_node_tp_dp")
    assert "multi_node_tp_dp supported on this hardware" in rows_by_status(b200)["fail"]


def test_all_to_all_backend_follows_the_fabric():
    nvl = check_recipe(K3, snap("gb300-8x-r580"), strategy="multi_node_dep")
    row = next(r for r in nvl.rows if r.requirement.startswith("all-to-all"))
    assert row.status == "pass" and "flashinfer_nvlink_one_sided" in row.found
    rdma = check_recipe(K3, snap("b200-8x-r580"), strategy="multi_node_tep")
    row = next(r for r in rdma.rows if r.requirement.startswith("all-to-all"))
    assert row.status == "pass" and "deepep_v2" in row.found


def _copy(name: str, tmp_path: Path, edit=None, drop: str | None = None) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst)
    if drop:
        (dst / drop).unlink()
    if edit:
        fname, old, new = edit
        path = dst / fname
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new))
    return dst


def test_pcie_only_node_fails_the_tp_interconnect(tmp_path):
    folder = _copy("gb300-8x-r580", tmp_path, ("topo-m.txt", "NV18", "SYS"))
    row = next(r for r in check_recipe(K3, load_snapshot_from_dir(folder)).rows if r.requirement.startswith("NVLink"))
    assert row.status == "fail" and row.found == "SYS between 8 GPUs"


def test_mig_enabled_fails(tmp_path):
    folder = _copy(
        "gb300-8x-r580",
        tmp_path,
        ("nvidia-smi-q.xml", "<current_mig>Disabled</current_mig>", "<current_mig>Enabled</current_mig>"),
    )
    row = next(r for r in check_recipe(K3, load_snapshot_from_dir(folder)).rows if r.requirement == "MIG off")
    assert row.status == "fail" and row.found.startswith("MIG enabled on GPU 0, 1")


def test_missing_captures_are_unknown_not_pass(tmp_path):
    folder = _copy("b200-8x-r580", tmp_path / "a", drop="infiniband.txt")
    report = check_recipe(K3, load_snapshot_from_dir(folder), strategy="multi_node_tp_pp")
    assert "RDMA or a multi-node NVLink domain" in rows_by_status(report)["unknown"]
    folder = _copy("gb300-8x-r580", tmp_path / "b", drop="env.txt")
    report = check_recipe(K3, load_snapshot_from_dir(folder))
    assert report.overall == "unknown"
    folder = _copy("gb300-8x-r580", tmp_path / "c", drop="pip-list.txt")
    by = rows_by_status(check_recipe(K3, load_snapshot_from_dir(folder)))
    assert {"vLLM >= 0.27.1", "CUDA 13 build (cu130)"} <= by["unknown"]


def test_cuda_visible_devices_limits_the_count(tmp_path):
    folder = _copy("gb300-8x-r580", tmp_path, ("env.txt", "LANG=C.UTF-8", "CUDA_VISIBLE_DEVICES=0,1,2,3"))
    report = check_recipe(K3, load_snapshot_from_dir(folder))
    row = next(r for r in report.rows if r.requirement == ">= 8 GPUs")
    assert row.status == "fail" and "4 visible (CUDA_VISIBLE_DEVICES=0,1,2,3)" in row.found


@pytest.mark.parametrize("version, status", [("0.11.2", "pass"), ("0.12.0", "fail"), ("0.32.0", "unknown")])
def test_kimi_linear_pin(tmp_path, version, status):
    folder = _copy("h100-8x-r575", tmp_path, ("pip-list.txt", "0.27.1+cu129", version))
    report = check_recipe(LINEAR, load_snapshot_from_dir(folder))
    row = next(r for r in report.rows if r.requirement == "vLLM == 0.11.2 (recipe pin)")
    assert row.status == status


def test_overall_with_no_rows_is_unknown():
    report = check_recipe(K3, snap("gb300-8x-r580"))
    assert dataclasses.replace(report, rows=()).overall == "unknown"


def test_report_json_is_redacted():
    report = check_recipe(K3, snap("h100-8x-r575"))
    data = report.to_dict()
    assert data["overall"] == "fail" and data["hardware"] == "h100"
    assert "constructedfixture" not in str(data)


def test_bad_recipe_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("meta: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_recipe(bad)
    bad.write_text("just: text\n")
    with pytest.raises(InputError, match="not a vLLM recipe"):
        load_recipe(bad)
    bad.write_text("model:\n  model_id: x\n  base_args: 3\n")
    with pytest.raises(InputError, match="model.base_args"):
        load_recipe(bad)
    with pytest.raises(InputError, match="cannot read"):
        load_recipe(tmp_path / "missing.yaml")


def test_recipe_tolerates_nulls_numbers_and_new_keys(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(
        "model:\n  model_id: org/m\n  min_vllm_version: 0.10\n  base_env:\n    VLLM_X: 1\n"
        "  base_args:\n    - --max-num-seqs\n    - 8\nhardware_overrides:\n  hopper:\n    extra_env:\n"
        "future_key: {anything: true}\ncompatible_strategies: [single_node_tp]\n"
    )
    rec = load_recipe(path)
    assert rec.model.base_env == {"VLLM_X": "1"} and rec.model.base_args == ["--max-num-seqs", "8"]
    assert rec.hardware_overrides["hopper"].extra_env == {} and rec.model.min_vllm_version == "0.10"


def test_unknown_names_suggest_the_nearest():
    b200 = snap("b200-8x-r580")
    cases = [
        (dict(strategy="multi_node_tp_p"), "did you mean 'multi_node_tp_pp'"),
        (dict(hardware="gb3000"), "did you mean 'gb300'"),
        (dict(variant="fp2"), "unknown variant 'fp2'"),
        (dict(strategy="multi_node_tp_pp", features=("spec_decoding",)), "not offered for multi_node_tp_pp"),
    ]
    for kwargs, text in cases:
        with pytest.raises(UsageError) as err:
            check_recipe(K3, b200, **kwargs)
        assert text in err.value.one_line()
