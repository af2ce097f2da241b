"""Regenerate triage's phase knowledge from vLLM's own source, for every minor release from 0.6 to the
newest on the package index, plus the vLLM installed here (the CPU build CI runs):

    .venv/bin/python scripts/gen_vllm_knowledge.py                    # all releases (~1 GB download once)
    .venv/bin/python scripts/gen_vllm_knowledge.py --check-installed  # exit 1 if the tables are stale
    .venv/bin/python scripts/gen_vllm_knowledge.py --fetch-only --versions 0.6.6.post1  # a release's source, for tests

Writes src/oomkit/data/vllm_knowledge/{messages,frames}.json.gz: each logger call and raise turned
into a pattern with its level or exception, the function that prints it ("module:function"), its
phase and the releases it appears in; and each function on a start-up phase's path with the root it
was reached from. docs/triage-knowledge.md says how phases are assigned."""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_knowledge.extract import OOM, phase_of_functions, read_release  # noqa: E402
from vllm_knowledge.source import fetch_source, release_versions  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "src" / "oomkit" / "data" / "vllm_knowledge"
# 3: messages built in a local name first (`msg = f"..."; raise ValueError(msg)`); 4: `assert cond, msg` messages;
# 5: a module's own `__name__` and `__package__` kept in its messages (module `__getattr__`)
GENERATOR_VERSION = 6
SHARED = "shared"  # the phase of a frame the roots of several phases reach: it places nothing
MODEL_EXECUTION = {"memory_profiling", "cudagraph_capture", "serving"}  # steps that run the model's forward
KEPT_LEVELS = {"warning", "warn", "error", "exception", "critical"}


def installed_source() -> tuple[Path, str] | None:
    try:
        import vllm
    except ImportError:
        return None
    return Path(vllm.__file__).resolve().parent.parent, f"installed-{vllm.__version__}"


def read_version(root: Path) -> tuple[dict[tuple, dict], dict[tuple, dict]]:
    templates, functions = read_release(root)
    phases = phase_of_functions(functions)
    messages: dict[tuple, dict] = {}
    for t in templates:
        phase = phases.get((t.module, t.function.rsplit(".", 1)[-1]), (None, None, 0, ()))[0]
        is_oom = bool(OOM.search(" ".join(t.literal)))
        if t.level not in KEPT_LEVELS and t.exception is None and phase is None and not is_oom:
            continue  # info/debug off every phase path: no verdict can rest on it
        kind = (
            "failure"
            if t.exception or t.level in ("error", "exception", "critical")
            else ("warning" if t.level in ("warning", "warn") else "marker")
        )
        key = (t.pattern, t.level, t.exception, f"{t.module}:{t.function}")
        messages[key] = {
            "pattern": t.pattern,
            "level": t.level,
            "exception": t.exception,
            "phase": phase,
            "is_oom": is_oom,
            "kind": kind,
            "source": key[3],
        }
    # The distance to the root is left out of the row: it moves between releases without the phase moving.
    frames = {}
    for (module, name), (phase, root_name, distance, reached) in phases.items():
        row_phase = frame_phase(phase, distance, reached)
        frames[(module, name, row_phase, root_name)] = {
            "source": f"{module}:{name}",
            "phase": row_phase,
            "root": root_name,
        }
    return messages, frames


def frame_phase(phase: str, distance: int, reached: tuple[str, ...]) -> str:
    """The phase of a function's frames. A root keeps its phase. A function the roots of several phases
    reach is `shared`, and places nothing: the frames around it tell the step (config, tokenizer and
    registry helpers, executor and worker set-up, generic wrappers). The model-execution path is the
    exception: the profiling pass and graph capture run the serving code on dummy batches, so a function
    reached only from those steps and serving is `serving`, which triage reads as such only when no
    start-up frame is in the traceback and no start-up marker comes before it."""
    if distance == 0 or len(reached) == 1:
        return phase
    if "serving" in reached and set(reached) <= MODEL_EXECUTION:
        return "serving"
    return SHARED


def merge(per_version: list[tuple[str, dict[tuple, dict]]], key_id: str) -> list[dict]:
    rows: dict[tuple, dict] = {}
    for index, (_, table) in enumerate(per_version):
        for key, row in table.items():
            merged = rows.setdefault(key, {**row, "v": []})
            merged["v"].append(index)
    out = []
    for number, row in enumerate(sorted(rows.values(), key=lambda r: (r["source"], r.get("pattern", "")))):
        row["v"] = _ranges(row["v"])
        out.append({"id": f"{key_id}{number:05d}", **row})
    return out


def _ranges(indexes: list[int]) -> list[list[int]]:
    spans: list[list[int]] = []
    for i in sorted(set(indexes)):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return spans


def generate(cache: Path, versions: list[str]) -> dict:
    per_messages: list[tuple[str, dict]] = []
    per_frames: list[tuple[str, dict]] = []
    meta_versions = []
    sources, unavailable = [], []
    for version in versions:
        try:
            sources.append((version, *fetch_source(version, cache)))
        except subprocess.CalledProcessError:
            unavailable.append(version)  # the index has no Linux x86_64 wheel of it: said in meta
            print(f"{version:>18}: no wheel on the package index for Linux x86_64; skipped", flush=True)
    local = installed_source()
    for version, root, digest in sources + ([(local[1], local[0], None)] if local else []):
        messages, frames = read_version(root)
        per_messages.append((version, messages))
        per_frames.append((version, frames))
        meta_versions.append(
            {"version": version, "wheel_sha256": digest, "messages": len(messages), "frames": len(frames)}
        )
        print(f"{version:>18}: {len(messages):6d} messages, {len(frames):6d} functions on a phase path", flush=True)
    meta = {
        "generator": GENERATOR_VERSION,
        "generated": dt.date.today().isoformat(),
        "versions": meta_versions,
        "unavailable": unavailable,
        "source": "pip download vllm==X (wheels from the package index); the installed vLLM as installed-X",
    }
    return {"meta": meta, "messages": merge(per_messages, "m"), "frames": merge(per_frames, "f")}


def write(tables: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in ("messages", "frames"):
        body = {"meta": tables["meta"], name: tables[name]}
        data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        (OUT / f"{name}.json.gz").write_bytes(gzip.compress(data, mtime=0))


def check_installed() -> int:
    """Exit 1 when the installed vLLM prints a template or has a phase function the tables lack."""
    local = installed_source()
    if local is None:
        print("vLLM is not installed: nothing to check against")
        return 0
    messages, frames = read_version(local[0])
    held = {
        name: json.loads(gzip.decompress((OUT / f"{name}.json.gz").read_bytes())) for name in ("messages", "frames")
    }
    have_messages = {(r["pattern"], r["level"], r["exception"], r["source"]) for r in held["messages"]["messages"]}
    have_frames = {(r["source"], r["phase"]) for r in held["frames"]["frames"]}
    missing = [k for k in messages if k not in have_messages]
    missing += [
        (row["source"], row["phase"]) for row in frames.values() if (row["source"], row["phase"]) not in have_frames
    ]
    for row in missing[:20]:
        print("missing:", row)
    print(f"{local[1]}: {len(messages)} messages, {len(frames)} frames; {len(missing)} missing from the tables")
    return 1 if missing else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "oomkit" / "vllm-src")
    ap.add_argument("--versions", nargs="*", help="default: the newest patch of every minor from 0.6 on")
    ap.add_argument("--check-installed", action="store_true")
    ap.add_argument("--fetch-only", action="store_true", help="download --versions' source to --cache, write nothing")
    args = ap.parse_args()
    if args.check_installed:
        raise SystemExit(check_installed())
    if args.fetch_only:
        for version in args.versions or []:
            print(f"vLLM {version}: source in {fetch_source(version, args.cache)[0]}")
        return
    tables = generate(args.cache, args.versions or release_versions())
    write(tables)
    print(f"wrote {len(tables['messages'])} message rows and {len(tables['frames'])} frame rows to {OUT}")


if __name__ == "__main__":
    main()
