"""One function per requirement row of the recipe check. Each returns
(requirement, found, status, why, source), or None when the row does not apply."""

from __future__ import annotations

import math
import re
from typing import Final, Literal

from oomkit.env.hardware import BY_KEY
from oomkit.env.model import EnvSnapshot, GpuInfo
from oomkit.env.recipe import ProseFacts, Recipe
from oomkit.env.settings import Selection, flag_key, min_gpus, split_flags
from oomkit.env.software import parse_version, version_at_least
from oomkit.env.strategies import Strategy
from oomkit.redact import MASK

Status = Literal["pass", "fail", "unknown"]
PASS: Final = "pass"
FAIL: Final = "fail"
UNKNOWN: Final = "unknown"
Row = tuple[str, str, Status, str, str]
GB = 1e9  # recipes state vram_minimum_gb in decimal GB: params x bytes x 1.2

# Why each requirement matters (the text users read next to a failure).
WHY = {
    "version": "older builds lack the model's architecture or kernels: startup fails before any memory question",
    "pin": "the recipe pins this version; others are untested for this model",
    "build": "a build for another CUDA (or the CPU) lacks the kernels the recipe's images ship",
    "driver": (
        "the recipe's builds need this driver branch; an older one fails at CUDA init, "
        "which looks like a crash, not an OOM"
    ),
    "driver_cuda": "a driver below the build's CUDA version fails at CUDA init (error 35: driver insufficient)",
    "model": "unverified GPUs may lack the kernels (FP4/MLA) or the memory the recipe's settings assume",
    "strategy": "the recipe validated this layout only on the hardware it lists",
    "count": "fewer GPUs means another layout and more memory per GPU than the recipe planned",
    "capacity": "total GPU memory below the weights' footprint cannot hold one replica: expand, no flag fixes it",
    "mig": "a MIG slice has a fraction of the GPU's memory and no NVLink; vLLM sees small GPUs",
    "tp_link": "tensor parallelism all-reduces every layer; over PCIe it is slow and custom all-reduce is off",
    "fabric": "cross-node traffic needs RDMA or a multi-node NVLink domain; over TCP NCCL is far slower",
    "all2all": "the expert-parallel all-to-all backend must match the fabric between nodes",
    "env": "an exported value overrides what the recipe sets and changes startup or memory",
    "nodes": "this check sees one node; every node of the layout must pass it too",
}


def floor(rec: Recipe, sel: Selection) -> int | None:
    return min_gpus(rec, sel.strategy, sel.hardware)[0]


def _vendor(hardware: str | None) -> str | None:
    hw = BY_KEY.get(hardware or "")
    return hw.vendor if hw else None


def vllm_version(rec: Recipe, snap: EnvSnapshot) -> Row | None:
    need = rec.model.min_vllm_version
    if need is None:
        return None
    req = f"vLLM >= {need}"
    sw = snap.software
    if sw is None or sw.vllm_version is None:
        where = "no package list captured" if sw is None else f"vLLM is not installed in {sw.source}"
        why = f"{WHY['version']}; check inside the serving image (pip list)"
        return req, where, UNKNOWN, why, "model.min_vllm_version"
    found = f"{sw.vllm_distribution} {sw.vllm_version}"
    try:
        ok = version_at_least(sw.vllm_version, need)
    except ValueError:
        return req, found, UNKNOWN, f"cannot read the version; {WHY['version']}", "model.min_vllm_version"
    if not ok and parse_version(sw.vllm_version)[0] == parse_version(need)[0]:
        found += " (a pre-release of the minimum)"
    return req, found, PASS if ok else FAIL, WHY["version"], "model.min_vllm_version"


def vllm_pin(prose: ProseFacts, snap: EnvSnapshot) -> Row | None:
    if prose.pin is None:
        return None
    req, quote = f"vLLM == {prose.pin} (recipe pin)", prose.quotes.get("pin", "")
    version = snap.software.vllm_version if snap.software else None
    if version is None:
        return req, "vLLM version unknown", UNKNOWN, f"{WHY['pin']}: {quote}", "dependencies"
    public = version.partition("+")[0]
    if public == prose.pin:
        return req, version, PASS, WHY["pin"], "dependencies"
    if public in prose.broken_versions:
        return req, version, FAIL, f"the recipe names this version as broken: {quote}", "dependencies"
    return req, version, UNKNOWN, f"not the pinned version and not verified by the recipe: {quote}", "dependencies"


def build(prose: ProseFacts, snap: EnvSnapshot, hardware: str | None) -> Row | None:
    vendor = _vendor(hardware)
    if prose.cuda_build and vendor in ("nvidia", None):
        major, tag = prose.cuda_build
        req, source, want = f"CUDA {major} build ({tag})", "install notes", f"cu{major}"
    elif vendor in ("nvidia", "amd"):
        req, source, want = (
            ("a CUDA build", "hardware", "cu") if vendor == "nvidia" else ("a ROCm build", "hardware", "rocm")
        )
    else:
        return None
    sw = snap.software
    if sw is None or (sw.cuda_flavour is None and sw.torch_cuda is None):
        found = "no package list captured" if sw is None else f"torch {sw.torch_version or 'not installed'}"
        return req, found, UNKNOWN, f"{WHY['build']}; the CUDA flavour of torch is unknown", source
    found = ", ".join(
        x
        for x in (
            f"{sw.vllm_distribution} {sw.vllm_version}" if sw.vllm_distribution else "",
            f"torch {sw.torch_version}" if sw.torch_version else "",
            f"CUDA {sw.torch_cuda}" if sw.torch_cuda else sw.cuda_flavour or "",
        )
        if x
    )
    return req, found, PASS if _build_is(sw.cuda_flavour, sw.torch_cuda, want) else FAIL, WHY["build"], source


def _build_is(flavour: str | None, torch_cuda: str | None, want: str) -> bool:
    """`want` is "cu" (any CUDA), "cu13" (CUDA 13.x) or "rocm"."""
    if want == "rocm":
        return (flavour or "").startswith("rocm")
    if not (flavour or "").startswith("cu") or torch_cuda is None:
        return False
    return want == "cu" or torch_cuda.split(".")[0] == want[2:]


def driver(prose: ProseFacts, snap: EnvSnapshot, hardware: str | None) -> Row | None:
    if prose.driver_min is None or _vendor(hardware) not in ("nvidia", None):
        return None
    req, source = f"NVIDIA driver >= r{prose.driver_min}", "install notes"
    version = snap.driver.driver_version if snap.driver else None
    if version is None:
        return req, snap.gpu_note or "driver version unknown", UNKNOWN, WHY["driver"], source
    leading = re.match(r"\d{1,9}", version)
    if leading is None:
        return req, version, UNKNOWN, WHY["driver"], source
    branch = int(leading.group(0))
    return req, version, PASS if branch >= prose.driver_min else FAIL, WHY["driver"], source


def driver_cuda(snap: EnvSnapshot, hardware: str | None) -> Row | None:
    sw = snap.software
    if sw is None or sw.torch_cuda is None or _vendor(hardware) not in ("nvidia", None):
        return None
    req = f"driver supports CUDA {sw.torch_cuda} (the build's)"
    have = snap.driver.cuda_driver_version if snap.driver else None
    if have is None:
        return req, snap.gpu_note or "driver CUDA version unknown", UNKNOWN, WHY["driver_cuda"], "oomkit"
    ok = version_at_least(have, sw.torch_cuda)
    return req, f"driver CUDA {have}", PASS if ok else FAIL, WHY["driver_cuda"], "oomkit"


def _describe(gpus: list[GpuInfo]) -> str:
    names: dict[str, int] = {}
    for g in gpus:
        names[g.name] = names.get(g.name, 0) + 1
    return ", ".join(f"{n}x {name}" for name, n in names.items())


def gpu_model(rec: Recipe, sel: Selection, snap: EnvSnapshot) -> Row:
    verified = [k for k, v in rec.meta.hardware.items() if str(v).lower() in ("verified", "supported")]
    req, source = f"GPU among verified: {', '.join(verified) or 'none listed'}", "meta.hardware"
    gpus = snap.visible_gpus
    if not gpus:
        named = f"--hardware {sel.hardware} named, " if sel.hardware_named else ""
        found = f"{named}no GPU visible ({snap.gpu_note or 'CUDA_VISIBLE_DEVICES hides them'})"
        return req, found, UNKNOWN, WHY["model"], source
    keys = {g.hardware for g in gpus}
    found = _describe(gpus) + (f" ({', '.join(sorted(k for k in keys if k))})" if any(keys) else "")
    if len(keys) > 1:
        return req, found, FAIL, f"mixed GPU models in one layout; {WHY['model']}", source
    key = keys.pop()
    if key is None:
        return req, found, UNKNOWN, f"oomkit does not know this GPU's recipe key; {WHY['model']}", source
    if sel.hardware_named and key != sel.hardware:
        return req, found, FAIL, f"--hardware {sel.hardware} was named but these GPUs are {key}", source
    return req, found, PASS if key in verified else FAIL, WHY["model"], source


def variant_hardware(rec: Recipe, sel: Selection) -> Row | None:
    variant = rec.variants.get(sel.variant)
    if variant is None or not variant.supported_hardware:
        return None
    req = f"variant {sel.variant} runs on {', '.join(variant.supported_hardware)}"
    if sel.hardware is None:
        return req, "hardware unknown", UNKNOWN, WHY["model"], f"variants.{sel.variant}.supported_hardware"
    ok = sel.hardware in variant.supported_hardware
    return req, sel.hardware, PASS if ok else FAIL, WHY["model"], f"variants.{sel.variant}.supported_hardware"


def strategy_hardware(rec: Recipe, sel: Selection) -> Row:
    grant = rec.strategy_hardware.get(sel.strategy, {})
    listed = sel.strategy in rec.compatible_strategies
    req = f"{sel.strategy} supported on this hardware"
    if sel.hardware is None:
        status: Status = PASS if listed and not grant else UNKNOWN
        found = "hardware unknown" + ("" if status == UNKNOWN else f"; {sel.strategy} is compatible")
        return req, found, status, WHY["strategy"], "compatible_strategies"
    mark = grant.get(sel.hardware)
    if mark == "unsupported" or (not listed and mark != "supported"):
        return req, f"{sel.hardware}: not supported", FAIL, WHY["strategy"], "strategy_hardware"
    where = "strategy_hardware" if mark else "compatible_strategies"
    return req, f"{sel.hardware}: {'supported' if mark else 'compatible'}", PASS, WHY["strategy"], where


def gpu_count(rec: Recipe, sel: Selection, snap: EnvSnapshot, nodes: int) -> Row | None:
    need, source = min_gpus(rec, sel.strategy, sel.hardware)
    if need is None:
        return None
    req, gpus = f">= {need} GPUs", snap.visible_gpus
    if not gpus:
        return req, "no GPU visible", UNKNOWN, WHY["count"], source
    here = f"{len(gpus)} visible"
    if snap.cuda_visible_devices is not None:
        here += f" (CUDA_VISIBLE_DEVICES={snap.cuda_visible_devices})"
    if nodes > 1:
        total = nodes * len(gpus)
        found = f"{here}; {nodes} nodes like this one: {total}"
        return req, found, PASS if total >= need else FAIL, WHY["count"], source
    return req, here, PASS if len(gpus) >= need else FAIL, WHY["count"], source


def capacity(rec: Recipe, sel: Selection, snap: EnvSnapshot, nodes: int) -> Row | None:
    variant = rec.variants.get(sel.variant)
    if variant is None or variant.vram_minimum_gb is None:
        return None
    need = variant.vram_minimum_gb
    req, source = f"GPU memory >= {need:g} GB (variant {sel.variant})", f"variants.{sel.variant}.vram_minimum_gb"
    gpus = snap.visible_gpus
    if not gpus or any(g.memory_total_bytes is None for g in gpus):
        return req, "GPU memory unknown", UNKNOWN, WHY["capacity"], source
    node_gb = sum(g.memory_total_bytes or 0 for g in gpus) / GB
    per_gpu = (gpus[0].memory_total_bytes or 0) / GB
    found = f"{len(gpus)} x {per_gpu:.1f} GB = {node_gb:.0f} GB"
    if nodes > 1:
        found += f"; {nodes} nodes like this one: {nodes * node_gb:.0f} GB"
    total = nodes * node_gb
    short = (
        ""
        if total >= need
        else (f"; short by {need - total:.0f} GB ({math.ceil(need / node_gb)} nodes like this one would hold it)")
    )
    return req, found, PASS if total >= need else FAIL, WHY["capacity"] + short, source


def mig(snap: EnvSnapshot) -> Row | None:
    modes = [g.mig_mode for g in snap.visible_gpus if g.mig_mode is not None]
    if not modes:
        return None
    enabled = [str(g.index) for g in snap.visible_gpus if g.mig_mode == "Enabled"]
    found = f"MIG enabled on GPU {', '.join(enabled)}" if enabled else "MIG disabled on all"
    return "MIG off", found, FAIL if enabled else PASS, WHY["mig"], "oomkit"


def interconnect(strat: Strategy, snap: EnvSnapshot) -> Row | None:
    if strat.multi_node:
        return _fabric_row(snap)
    gpus = snap.visible_gpus
    req = "NVLink between all GPUs of the node"
    if len(gpus) < 2:
        return None if gpus else (req, "no GPU visible", UNKNOWN, WHY["tp_link"], "oomkit")
    if snap.topology is None:
        return req, "topology not captured (nvidia-smi topo -m)", UNKNOWN, WHY["tp_link"], "oomkit"
    names = tuple(f"GPU{g.index}" for g in gpus)
    ok = snap.topology.nvlink_all_pairs(names)
    if ok is None:
        return req, "topology lacks some GPU pairs", UNKNOWN, WHY["tp_link"], "oomkit"
    kinds = sorted({snap.topology.link(a, b) or "?" for i, a in enumerate(names) for b in names[i + 1 :]})
    return req, f"{', '.join(kinds)} between {len(names)} GPUs", PASS if ok else FAIL, WHY["tp_link"], "oomkit"


def fabric(snap: EnvSnapshot) -> str | None:
    """ "nvlink" for a multi-node NVLink domain, "rdma" for active RDMA ports, else None."""
    gpus = snap.visible_gpus
    if gpus and all(g.in_multi_node_nvlink for g in gpus):
        return "nvlink"
    rdma = snap.host.rdma_devices if snap.host else None
    return "rdma" if rdma and any(d.active for d in rdma) else None


def _fabric_row(snap: EnvSnapshot) -> Row:
    req = "RDMA or a multi-node NVLink domain"
    kind = fabric(snap)
    rdma = snap.host.rdma_devices if snap.host else None
    if kind == "nvlink":
        g = snap.visible_gpus[0]
        found = f"NVLink domain (cluster {g.fabric_cluster_uuid}, clique {g.fabric_clique_id})"
        return req, found, PASS, WHY["fabric"], "oomkit"
    if kind == "rdma":
        active = [d for d in rdma or () if d.active]
        layers = sorted({d.link_layer or "?" for d in active})
        found = f"RDMA: {len(active)} active ({', '.join(layers)}): {', '.join(d.name for d in active)}"
        return req, found, PASS, WHY["fabric"], "oomkit"
    if rdma is None:
        return req, "RDMA devices not captured; no NVLink fabric seen", UNKNOWN, WHY["fabric"], "oomkit"
    state = f"{len(rdma)} RDMA device(s), none ACTIVE" if rdma else "no /sys/class/infiniband device"
    return req, f"{state}; no multi-node NVLink fabric", FAIL, WHY["fabric"], "oomkit"


def all2all(prose: ProseFacts, strat: Strategy, snap: EnvSnapshot, args: list[str]) -> Row | None:
    if not (strat.multi_node and strat.expert_parallel and prose.all2all):
        return None
    notes = ", ".join(f"{b} for {k}" for k, b in prose.all2all.items())
    req, kind = f"all-to-all backend for the fabric ({notes})", fabric(snap)
    if kind is None or kind not in prose.all2all:
        return req, "fabric unknown", UNKNOWN, WHY["all2all"], "guide notes"
    want = prose.all2all[kind]
    set_to = next((g[1] for g in split_flags(args) if flag_key(g[0]) == "--all2all-backend" and len(g) > 1), None)
    if set_to and set_to != want:
        why = f"{WHY['all2all']}: use --all2all-backend {want}"
        return req, f"{kind}: recipe args set {set_to}", FAIL, why, "guide notes"
    return req, f"{kind}: use --all2all-backend {want}", PASS, WHY["all2all"], "guide notes"


def env_conflicts(wanted: dict[str, str], snap: EnvSnapshot) -> Row | None:
    if not wanted:
        return None
    req = f"no exported value contradicts the recipe's env ({len(wanted)} variables)"
    if snap.source == "captured" and not any(kind == "env" for kind, _ in snap.files):
        return req, "environment not captured (env > env.txt)", UNKNOWN, WHY["env"], "oomkit"
    clash = {k: snap.env[k] for k, v in wanted.items() if k in snap.env and snap.env[k] not in (v, MASK)}
    if clash:
        found = "; ".join(f"{k}={v} here, recipe {wanted[k]}" for k, v in clash.items())
        return req, found, FAIL, WHY["env"], "oomkit"
    same = sum(1 for k, v in wanted.items() if snap.env.get(k) == v)
    found = f"no conflict ({same} of {len(wanted)} already set; the launch env sets the rest)"
    return req, found, PASS, WHY["env"], "oomkit"


def other_nodes(strat: Strategy, nodes: int, snap: EnvSnapshot) -> Row | None:
    if not strat.multi_node:
        return None
    return (
        f"{nodes} nodes like this one",
        "1 node checked",
        UNKNOWN,
        f"{WHY['nodes']}: run `oomkit env --recipe ...` on each (or --from a capture of each)",
        "oomkit",
    )
