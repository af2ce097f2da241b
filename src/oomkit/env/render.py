"""Plain-text renderings of a snapshot and a recipe check. Pure: width is a parameter."""

from __future__ import annotations

import shlex
import textwrap
from functools import partial

from oomkit.env.check import CheckReport
from oomkit.env.host import ULIMIT_UNITS
from oomkit.env.model import EnvSnapshot
from oomkit.redact import redact

GIB = 1024**3
_STATUS = {"pass": "PASS", "fail": "FAIL", "unknown": "UNKNOWN"}
_REQUIREMENT_WIDTH = 34
# Flags and paths must not be split at their hyphens.
_wrap = partial(textwrap.wrap, break_on_hyphens=False, break_long_words=False)


def _gib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / GIB:.1f} GiB"


def _ulimit(name: str, value: str) -> str:
    unit = ULIMIT_UNITS.get(name) if value.isdigit() else None
    return f"{name}={value}" + (f" {unit}" if unit else "")


def _pairs(rows: list[tuple[str, str]], width: int) -> list[str]:
    key_w = max((len(k) for k, _ in rows), default=0)
    out = []
    for key, value in rows:
        wrapped = _wrap(value, max(width - key_w - 2, 20)) or [""]
        out.append(f"{key.ljust(key_w)}  {wrapped[0]}")
        out += [" " * (key_w + 2) + more for more in wrapped[1:]]
    return out


def render_snapshot(snap: EnvSnapshot, width: int = 100) -> str:
    d, sw, h = snap.driver, snap.software, snap.host
    rows = [
        ("source", f"{snap.source} ({snap.taken_at})"),
        ("driver", f"{d.driver_version or '?'} (CUDA {d.cuda_driver_version or '?'}; via {d.source})" if d else "none"),
        ("GPUs", f"{len(snap.gpus)} ({len(snap.visible_gpus)} visible)" if snap.gpus else f"none: {snap.gpu_note}"),
        ("CUDA_VISIBLE_DEVICES", snap.cuda_visible_devices if snap.cuda_visible_devices is not None else "not set"),
    ]
    if sw:
        rows += [
            ("vLLM", f"{sw.vllm_distribution} {sw.vllm_version}" if sw.vllm_distribution else "not installed"),
            ("torch", f"{sw.torch_version or 'not installed'} (CUDA flavour: {sw.cuda_flavour or 'unknown'})"),
            ("NCCL", sw.nccl_version or "unknown (no nvidia-nccl package)"),
            ("packages from", sw.source),
        ]
    if h:
        rdma = (
            "not captured"
            if h.rdma_devices is None
            else (", ".join(f"{r.name} {r.link_layer or ''} {r.state or ''}".strip() for r in h.rdma_devices) or "none")
        )
        rows += [
            ("CPU", f"{h.cpu_model or 'unknown'} ({h.cpu_count or '?'} CPUs)"),
            ("RAM", f"{_gib(h.ram_total_bytes)} total, {_gib(h.ram_available_bytes)} available"),
            ("ulimits", ", ".join(_ulimit(k, v) for k, v in h.ulimits) or "not captured"),
            ("/dev/shm", _gib(h.shm_bytes)),
            ("container", ", ".join(h.container_hints) or "no hints"),
            ("RDMA", rdma),
        ]
    lines = _pairs(rows, width)
    if snap.gpus:
        lines += ["", *_gpu_table(snap)]
    if snap.topology:
        lines += ["", "topology: " + _topology_summary(snap)]
    if snap.env:
        lines += ["", "environment:", *_pairs([(f"  {k}", v) for k, v in snap.env.items()], width)]
    if snap.notes:
        lines += ["", "notes:", *(f"  - {n}" for n in snap.notes)]
    return redact("\n".join(lines)) + "\n"


def _gpu_table(snap: EnvSnapshot) -> list[str]:
    visible = {g.index for g in snap.visible_gpus}
    header = ("idx", "name", "memory", "MIG", "bus id", "uuid", "fabric")
    body = [
        (
            f"{g.index}{'' if g.index in visible else ' (hidden)'}",
            g.name,
            _gib(g.memory_total_bytes),
            g.mig_mode or "n/a",
            g.pci_bus_id or "?",
            g.uuid or "?",
            ("NVL domain" if g.in_multi_node_nvlink else (g.fabric_state or "n/a")),
        )
        for g in snap.gpus
    ]
    widths = [max(len(r[i]) for r in (header, *body)) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in (header, *body)]


def _topology_summary(snap: EnvSnapshot) -> str:
    topo = snap.topology
    assert topo is not None
    gpus = topo.gpus
    kinds = sorted({topo.link(a, b) or "?" for i, a in enumerate(gpus) for b in gpus[i + 1 :]})
    nics = ", ".join(f"{n}={dev}" for n, dev in topo.nics)
    return f"{len(gpus)} GPUs, GPU-GPU links: {', '.join(kinds) or 'none'}" + (f"; NICs: {nics}" if nics else "")


def render_check(report: CheckReport, width: int = 100) -> str:
    lines = [
        f"{report.recipe}: {report.strategy} on {report.hardware or 'unknown hardware'}, "
        f"variant {report.variant} (environment: {report.snapshot_source})",
        "",
    ]
    header = ("status", "requirement", "found")
    body = [(_STATUS[r.status], r.requirement, r.found) for r in report.rows]
    w0 = max(len(r[0]) for r in (header, *body))
    w1 = min(max(len(r[1]) for r in (header, *body)), _REQUIREMENT_WIDTH)
    w2 = max(width - w0 - w1 - 4, 24)
    lines.append(f"{header[0].ljust(w0)}  {header[1].ljust(w1)}  {header[2]}")
    for row, (status, req, found) in zip(report.rows, body, strict=False):
        req_lines = _wrap(req, w1) or [""]
        found_lines = _wrap(found, w2) or [""]
        why_lines = _wrap(f"why: {row.why}", w2)
        right = found_lines + why_lines
        for i in range(max(len(req_lines), len(right))):
            left = (status if i == 0 else "").ljust(w0)
            mid = (req_lines[i] if i < len(req_lines) else "").ljust(w1)
            lines.append(f"{left}  {mid}  {right[i] if i < len(right) else ''}".rstrip())
    lines += ["", f"overall: {_STATUS[report.overall]}"]
    if report.args or report.env:
        lines += [
            "",
            f"the recipe sets for {report.hardware or 'this hardware'} / {report.strategy} "
            "(oomkit env --print-command writes the full command):",
        ]
        if report.args:
            lines += _wrap("args: " + shlex.join(report.args), width, subsequent_indent="  ")
        lines += [f"env:  {k}={v}" for k, v in report.env.items()]
    return redact("\n".join(lines)) + "\n"
