"""Fetch vLLM's Python source for a release: the wheel from the package index (pip download), only
its `vllm/**/*.py` kept in a cache folder. Wheels hold the same Python source as the sdist, and the
sdist would need a GPU build."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PLATFORM_ARGS = [
    "--only-binary",
    ":all:",
    "--python-version",
    "3.12",
    "--platform",
    "manylinux_2_35_x86_64",
    "--platform",
    "manylinux_2_34_x86_64",
    "--platform",
    "manylinux_2_31_x86_64",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "manylinux1_x86_64",
]
FIRST_MINOR = (0, 6)


def release_versions() -> list[str]:
    """The newest patch of every minor release from 0.6 on, as the package index lists them."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "vllm"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    listed = re.search(r"Available versions: (.+)", done.stdout)
    if not listed:
        raise SystemExit("pip index versions vllm listed no versions")
    newest: dict[tuple[int, int], str] = {}
    for version in (v.strip() for v in listed.group(1).split(",")):
        parts = re.match(r"(\d+)\.(\d+)", version)
        if not parts or "rc" in version or "dev" in version:
            continue
        minor = (int(parts.group(1)), int(parts.group(2)))
        if minor >= FIRST_MINOR and (minor not in newest or _key(version) > _key(newest[minor])):
            newest[minor] = version
    return [newest[m] for m in sorted(newest)]


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def fetch_source(version: str, cache: Path) -> tuple[Path, str]:
    """The folder holding `vllm/` of that release and the wheel's sha256 (downloaded once)."""
    target = cache / version
    stamp = target / ".wheel-sha256"
    if stamp.exists():
        return target, stamp.read_text().strip()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM_ARGS, f"vllm=={version}", "-d", tmp],
            check=True,
            timeout=1800,
        )
        wheel = next(Path(tmp).glob("vllm-*.whl"))
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        partial = target.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith("vllm/") and name.endswith(".py"):
                    archive.extract(name, partial)
        (partial / ".wheel-sha256").write_text(digest + "\n")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target, digest
