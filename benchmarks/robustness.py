"""Fuzz every oomkit file reader with mutated real files and random structured documents.

A crash is any exception that is not an oomkit.errors.OomkitError (those are the documented,
one-line errors); a hang is an input that runs past --limit-s. Run:

    .venv/bin/python benchmarks/robustness.py            # 100,000 inputs, 2 worker processes
    .venv/bin/python benchmarks/robustness.py -n 2000 --markdown
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path("/work/shared")
SEED_BYTES = 24_000  # logs are cut to this: small inputs keep 100,000 runs within minutes


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


# --- readers: name -> (call on a path, how the path is laid out) -----------------------------

def _readers() -> dict[str, tuple[Callable[[Path], Any], str]]:
    """Every reader importable now. Layout "file": the input is the file; "dir:NAME": the input
    is NAME inside a fresh folder and the reader gets the folder."""
    from oomkit.env import nvsmi
    from oomkit.env.recipe import load_recipe
    from oomkit.env.snapshot import load_snapshot_from_dir
    from oomkit.plan.catalog import find_model
    from oomkit.triage import analyse

    def text(p: Path) -> str:
        return p.read_bytes().decode("utf-8", errors="replace")

    found: dict[str, tuple[Callable[[Path], Any], str]] = {
        "logs": (lambda p: analyse([str(p)]), "file"),
        "recipe": (load_recipe, "file"),
        "nvsmi-xml": (lambda p: nvsmi.parse_smi_xml(text(p), str(p)), "file"),
        "nvsmi-topo": (lambda p: nvsmi.parse_topo(text(p), str(p)), "file"),
        "env-dir": (load_snapshot_from_dir, "dir:nvidia-smi-q.xml"),
        "model-config": (lambda p: find_model(str(p)), "dir:config.json"),
    }
    optional = (
        ("profile", "oomkit.launch.profile", "load_profile", "file"),
        ("workload", "oomkit.workload.spec", "load_workload", "file"),
        ("requirements", "oomkit.decide.requirements", "load_requirements", "file"),
        ("experiment", "oomkit.compare.spec", "load_experiment", "file"),
        ("import", "oomkit.imports", "read_import", "file"),
        ("request-set", "oomkit.workload.requestset", "read_request_set", "file"),
        ("run-folder", "oomkit.decide.evidence", "read_folder", "dir:manifest.json"),
    )
    for name, module, func, layout in optional:
        try:
            mod = __import__(module, fromlist=[func])
            found[name] = (getattr(mod, func), layout)
        except (ImportError, AttributeError):
            continue  # that stage is not in the tree yet
    return found


# --- seeds: real files per reader ------------------------------------------------------------

def _glob(*patterns: str) -> list[Path]:
    out: list[Path] = []
    for pat in patterns:
        base = SHARED if pat.startswith("shared/") else ROOT
        out += sorted(base.glob(pat.removeprefix("shared/")))
    return [p for p in out if p.is_file()]


_VLLM_BENCH = {"date": "20260101-000000", "backend": "vllm", "model_id": "tiny", "num_prompts": 100,
               "request_rate": "inf", "max_concurrency": 8, "completed": 100, "duration": 12.5,
               "request_throughput": 8.0, "output_throughput": 800.0, "mean_ttft_ms": 40.0,
               "median_ttft_ms": 35.0, "p99_ttft_ms": 90.0, "mean_tpot_ms": 9.0, "p99_tpot_ms": 15.0,
               "mean_itl_ms": 9.0, "p99_itl_ms": 20.0}
_GUIDELLM = {"benchmarks": [{"args": {"strategy": {"type_": "concurrent", "streams": 4}},
                             "metrics": {"time_to_first_token_ms": {"successful": {"mean": 40, "median": 35,
                                                                                  "percentiles": {"p99": 80}}},
                                         "requests_per_second": {"successful": {"mean": 3.2}}}}],
             "config": {"model": "tiny", "data": "prompt_tokens=128"}}
_MANIFEST = {"schema": "oomkit.run/1", "run_id": "20260101-000000-abcd", "kind": "launch", "label": None,
             "state": "complete", "created_at": "2026-01-01T00:00:00Z", "oomkit_version": "0.1.0",
             "files": {"manifest.json": "this file"}}


def _seeds() -> dict[str, list[bytes]]:
    logs = _glob("shared/research/cpu-logs/*.log", "shared/fixtures/vllm-logs/*.log", "tests/fixtures/excerpts/*.log")
    env = ROOT / "tests/fixtures/env"
    files = {
        "logs": logs,
        "recipe": _glob("shared/fixtures/recipes/*.yaml"),
        "nvsmi-xml": _glob("tests/fixtures/env/*/nvidia-smi-q.xml"),
        "nvsmi-topo": _glob("tests/fixtures/env/*/topo-m.txt"),
        "env-dir": sorted(env.glob("*/nvidia-smi-q.xml")) + sorted(env.glob("*/topo-m.txt")),
        "model-config": _glob("shared/fixtures/model-configs/*.json"),
        "profile": _glob("examples/testbed-*.yaml"),
        "workload": _glob("examples/workload-*.yaml"),
        "requirements": _glob("examples/requirements-*.yaml"),
        "experiment": _glob("examples/experiment-*.yaml"),
    }
    seeds = {k: [p.read_bytes()[:SEED_BYTES] if k == "logs" else p.read_bytes() for p in v] for k, v in files.items()}
    seeds["import"] = [json.dumps(_VLLM_BENCH).encode(), json.dumps(_GUIDELLM).encode()]
    seeds["request-set"] = [b'{"kind": "oomkit.request_set/1", "id": "x", "requests": 1}\n'
                            b'{"id": "r0", "kind": "chat", "body": {"messages": []}, "sizes": {}}\n']
    seeds["run-folder"] = [json.dumps(_MANIFEST).encode()]
    if not seeds["experiment"]:
        seeds["experiment"] = [b"name: e\nprofile: examples/testbed-healthy.yaml\nconcurrency: 2\n"
                               b"variants:\n  - name: big-kv\n    set: {max_num_seqs: 4}\n"]
    return {k: v for k, v in seeds.items() if v}


# --- mutators --------------------------------------------------------------------------------

ANSI = (b"\x1b[31m", b"\x1b[0m", b"\x1b[2K\r", b"\x1b]0;title\x07", b"\x1b[?25l")


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [data]


def cut(rng: random.Random, data: bytes, other: bytes) -> bytes:
    a = rng.randrange(len(data) + 1)
    return data[:a] if rng.random() < 0.6 else data[a:]


def splice(rng: random.Random, data: bytes, other: bytes) -> bytes:
    return data[:rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1):]


def flip(rng: random.Random, data: bytes, other: bytes) -> bytes:
    buf = bytearray(data or b"\x00")
    for _ in range(rng.randint(1, 16)):
        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    return bytes(buf)


def duplicate(rng: random.Random, data: bytes, other: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    return b"".join(lines[:i] + [lines[i]] * rng.randint(2, 50) + lines[i:])


def reorder(rng: random.Random, data: bytes, other: bytes) -> bytes:
    lines = _lines(data)
    if rng.random() < 0.5:
        rng.shuffle(lines)
    else:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return b"".join(lines)


def inject(rng: random.Random, data: bytes, other: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 10)):
        junk = rng.choice(ANSI + (b"\x00", b"\x00" * 64, b"\r", b"\xff\xfe", b"\xef\xbb\xbf"))
        pos = rng.randrange(len(buf) + 1)
        buf[pos:pos] = junk
    return bytes(buf)


def giant(rng: random.Random, data: bytes, other: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    size = rng.choice((70_000, 200_000, 1_100_000))
    unit = rng.choice((b"A", b"\x00", b"GiB ", lines[i].rstrip(b"\n") or b"x"))
    lines.insert(i, (unit * (size // len(unit) + 1))[:size] + (b"\n" if rng.random() < 0.5 else b""))
    return b"".join(lines)


def empty(rng: random.Random, data: bytes, other: bytes) -> bytes:
    return rng.choice((b"", b"\n", b"\x00", b" \t\n", b"\xef\xbb\xbf", b"\x1f\x8b\x08\x00"))


# Random structured documents: parse the seed, then replace, drop or add values at random.
WEIRD = (None, True, 0, -1, 2**63, 1e308, float("nan"), "", "x" * 300, "../../etc", "0.10", [], {},
         [None], {"": None}, "\x00", "${HOME}", "-1GiB", "inf", 3.5)


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.6:
        return rng.choice(WEIRD)
    if roll < 0.8:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(("name", "model", "args", "x", "1", "state", "schema")): _random_value(rng, depth + 1)
            for _ in range(rng.randint(0, 4))}


def _mutate_tree(rng: random.Random, node: Any, depth: int = 0) -> Any:
    if isinstance(node, dict) and node and depth < 8:
        key = rng.choice(list(node))
        roll = rng.random()
        if roll < 0.25:
            node.pop(key)
        elif roll < 0.5:
            node[key] = _random_value(rng)
        elif roll < 0.6:
            node[f"unknown_{rng.randrange(99)}"] = _random_value(rng)
        else:
            node[key] = _mutate_tree(rng, node[key], depth + 1)
        return node
    if isinstance(node, list) and node and depth < 8:
        i = rng.randrange(len(node))
        node[i] = _mutate_tree(rng, node[i], depth + 1) if rng.random() < 0.6 else _random_value(rng)
        return node
    return _random_value(rng)


def structured(rng: random.Random, data: bytes, other: bytes) -> bytes:
    text = data.decode("utf-8", errors="replace")
    as_json = text.lstrip().startswith(("{", "["))
    try:
        tree = json.loads(text) if as_json else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return flip(rng, data, other)
    for _ in range(rng.randint(1, 4)):
        tree = _mutate_tree(rng, tree)
    if as_json:
        return json.dumps(tree, default=str).encode()
    return yaml.safe_dump(tree, allow_unicode=True, sort_keys=False).encode("utf-8", errors="replace")


MUTATORS: dict[str, Callable[[random.Random, bytes, bytes], bytes]] = {
    f.__name__: f for f in (cut, splice, flip, duplicate, reorder, inject, giant, empty, structured)}


# --- running ---------------------------------------------------------------------------------

@dataclass
class Tally:
    tried: int = 0
    crashes: int = 0
    hangs: int = 0
    documented: int = 0
    examples: list[dict[str, str]] = field(default_factory=list)


def _place(work: Path, layout: str, data: bytes) -> Path:
    if layout == "file":
        target = work / "input"
        target.write_bytes(data)
        return target
    folder = work / "folder"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    (folder / layout.removeprefix("dir:")).write_bytes(data)
    return folder


def _where(err: BaseException) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    last = frames[-1] if frames else None
    return f"{Path(last.filename).name}:{last.lineno}" if last else "?"


def run_one(reader: Callable[[Path], Any], path: Path, limit_s: float) -> tuple[str, BaseException | None]:
    from oomkit.errors import OomkitError

    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        reader(path)
        return "ok", None
    except Hang as err:
        return "hang", err
    except OomkitError:
        return "documented", None
    except RecursionError as err:  # counts as a crash, but must not take the harness down
        return "crash", err
    except Exception as err:  # noqa: BLE001 — anything else is the crash we are counting
        return "crash", err
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _worker(args: tuple[int, int, float, str | None]) -> dict[str, Tally]:
    count, seed, limit_s, keep_dir = args
    signal.signal(signal.SIGALRM, _alarm)
    readers, seeds = _readers(), _seeds()
    names = [n for n in readers if n in seeds]
    rng = random.Random(seed)
    tallies = {n: Tally() for n in names}
    with tempfile.TemporaryDirectory(prefix="oomkit-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        work = Path(tmp)
        for i in range(count):
            name = names[i % len(names)]
            reader, layout = readers[name]
            pool = seeds[name]
            mut = rng.choice(list(MUTATORS))
            data = MUTATORS[mut](rng, rng.choice(pool), rng.choice(pool))
            path = _place(work, layout, data)
            outcome, err = run_one(reader, path, limit_s)
            t = tallies[name]
            t.tried += 1
            if outcome == "documented":
                t.documented += 1
            elif outcome in ("crash", "hang"):
                t.crashes += outcome == "crash"
                t.hangs += outcome == "hang"
                if len(t.examples) < 3:
                    t.examples.append({"kind": outcome, "mutator": mut, "size": str(len(data)),
                                       "error": f"{type(err).__name__}: {str(err)[:160]}", "at": _where(err)})
                if keep_dir:
                    out = Path(keep_dir) / f"{name}-{seed}-{i}-{mut}.bin"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(data)
    return tallies


def fuzz(count: int, workers: int = 2, seed: int = 0, limit_s: float = 5.0,
         keep_dir: str | None = None) -> dict[str, Tally]:
    """Run `count` inputs split over `workers` processes; per-reader tallies."""
    shares = [count // workers + (1 if w < count % workers else 0) for w in range(workers)]
    jobs = [(n, seed * 1000 + w, limit_s, keep_dir) for w, n in enumerate(shares) if n]
    if workers == 1:
        parts = [_worker(j) for j in jobs]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_worker, jobs)
    total: dict[str, Tally] = {}
    for part in parts:
        for name, t in part.items():
            acc = total.setdefault(name, Tally())
            acc.tried += t.tried
            acc.crashes += t.crashes
            acc.hangs += t.hangs
            acc.documented += t.documented
            acc.examples += t.examples[: max(0, 3 - len(acc.examples))]
    return total


def render(total: dict[str, Tally], seconds: float, markdown: bool) -> str:
    rows = [(n, t.tried, t.documented, t.crashes, t.hangs) for n, t in sorted(total.items())]
    rows.append(("all readers", *(sum(r[i] for r in rows) for i in range(1, 5))))
    head = ("reader", "inputs tried", "documented errors", "crashes", "hangs")
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(f"{c:,}" if isinstance(c, int) else c for c in r) + " |" for r in rows]
    else:
        lines = [f"{head[0]:<14}{head[1]:>14}{head[2]:>19}{head[3]:>9}{head[4]:>7}"]
        lines += [f"{r[0]:<14}{r[1]:>14,}{r[2]:>19,}{r[3]:>9,}{r[4]:>7,}" for r in rows]
    lines.append(f"\n{rows[-1][1]:,} inputs in {seconds:.0f} s")
    for name, t in sorted(total.items()):
        for ex in t.examples:
            lines.append(f"  {ex['kind']} in {name} ({ex['mutator']}, {ex['size']} bytes) at {ex['at']}: {ex['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--count", type=int, default=100_000, help="inputs to try (default 100000)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit-s", type=float, default=5.0, help="per-input time limit; past it is a hang")
    ap.add_argument("--keep", metavar="DIR", help="save every crashing or hanging input here")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args(argv)
    start = time.monotonic()
    total = fuzz(args.count, args.workers, args.seed, args.limit_s, args.keep)
    print(render(total, time.monotonic() - start, args.markdown))
    return 1 if any(t.crashes or t.hangs for t in total.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
