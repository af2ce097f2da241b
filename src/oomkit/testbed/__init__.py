"""The embedded testbed: tiny random models the real vLLM CPU engine serves, and launch profiles
that reproduce a healthy start and the classic startup failures on any Linux machine."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from oomkit.serial import JsonObject
from oomkit.testbed.model import KINDS, ModelSpec, default_model_dir, is_model_dir, make_model, read_spec, testbed_root
from oomkit.testbed.profiles import PROFILES, TestbedProfile, render_profile, write_profiles

__all__ = [
    "KINDS",
    "PROFILES",
    "ModelSpec",
    "Testbed",
    "TestbedProfile",
    "create_testbed",
    "default_model_dir",
    "is_model_dir",
    "make_model",
    "read_spec",
    "render_profile",
    "testbed_root",
    "write_profiles",
]


@dataclass(frozen=True)
class Testbed:
    root: Path
    models: dict[str, Path]
    built: tuple[str, ...]
    """Kinds built by this call; the others were already there and were kept."""
    profiles: tuple[Path, ...]

    def to_dict(self) -> JsonObject:
        return {
            "root": str(self.root),
            "models": {k: str(v) for k, v in self.models.items()},
            "built": list(self.built),
            "profiles": [str(p) for p in self.profiles],
        }


def create_testbed(
    out_dir: str | os.PathLike[str] | None = None, kinds: tuple[str, ...] = KINDS, force: bool = False
) -> Testbed:
    """Models under `<out_dir>/<kind>` (default: the testbed root the examples use) and profiles
    pointing at them under `<out_dir>/profiles`. Existing models are kept unless `force`."""
    root = Path(out_dir).expanduser().resolve() if out_dir is not None else testbed_root()
    models: dict[str, Path] = {}
    built: list[str] = []
    for kind in kinds:
        path = root / kind
        if force or not is_model_dir(path):
            make_model(path, kind)
            built.append(kind)
        models[kind] = path
    profiles = write_profiles(root / "profiles", models)
    return Testbed(root, models, tuple(built), tuple(profiles))
