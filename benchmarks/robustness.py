"""Fuzz every oomkit file reader with mutated real files and random structured documents, and print
issue 7's table: inputs tried, crashes, hangs, faults injected and survived, records lost, secrets leaked.

A crash is any exception that is not an oomkit.errors.OomkitError (those are the documented,
one-line errors); a hang is an input that uses more than --limit-s of CPU time, or more than
--wall-s of wall time. Run:

    .venv/bin/python benchmarks/robustness.py                 # 100,000 inputs, 2 worker processes
    .venv/bin/python benchmarks/robustness.py -n 5000 --markdown
    .venv/bin/python benchmarks/robustness.py --with-server --markdown --write-doc docs/reliability.md
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path("/work/shared")
SEED_BYTES = 24_000  # logs are cut to this: small inputs keep 100,000 runs within minutes
CHUNK = 2_500  # inputs per task: progress is printed, and each chunk's inputs depend only on (seed, chunk)
RUN_ID = "20260101-000000-fuzz-0000"
REQUIREMENTS = ROOT / "examples/requirements-testbed.yaml"
BEGIN, END = "<!-- robustness:begin -->", "<!-- robustness:end -->"


class Hang(BaseException):
    """Raised by the CPU or wall timer. A BaseException, so a reader's `except Exception` cannot eat it."""


def _on_timer(signum: int, frame: Any) -> None:
    raise Hang("cpu" if signum == signal.SIGPROF else "wall")


# --- readers: name -> (call on a path, layout) -----------------------------------------------
# "file": the path is the mutated file. "dir": a folder holding the seed's file (a copy of the seed's
# real folder around it, when it has one). "runs": the folder's parent, a runs directory.


def _readers() -> dict[str, tuple[Callable[[Path], Any], str]]:
    """Every reader importable now, each followed as far as oomkit takes what it read."""
    from oomkit.env import nvsmi
    from oomkit.env.recipe import load_recipe
    from oomkit.env.snapshot import load_snapshot_from_dir
    from oomkit.plan import PlanRequest, find_model, plan
    from oomkit.triage import analyse

    def text(p: Path) -> str:
        return p.read_bytes().decode("utf-8", errors="replace")

    def model_config(p: Path) -> None:
        find_model(str(p))
        plan(PlanRequest(model=str(p), gpu="H100-80GB", gpus=8))

    found: dict[str, tuple[Callable[[Path], Any], str]] = {
        "logs": (lambda p: analyse([str(p)]), "file"),
        "recipe": (load_recipe, "file"),
        "nvsmi-xml": (lambda p: nvsmi.parse_smi_xml(text(p), str(p)), "file"),
        "nvsmi-topo": (lambda p: nvsmi.parse_topo(text(p), str(p)), "file"),
        "env-dir": (load_snapshot_from_dir, "dir"),
        "model-config": (model_config, "dir"),
    }
    optional = (
        ("profile", "oomkit.launch.profile", "load_profile", "file"),
        ("workload", "oomkit.workload.spec", "load_workload", "file"),
        ("requirements", "oomkit.decide.requirements", "load_requirements", "file"),
        ("experiment", "oomkit.compare.spec", "load_experiment", "file"),
        ("request-set", "oomkit.workload.requestset", "read_request_set", "file"),
        ("import", "oomkit.report", _report_of, "file"),
        ("run-folder", "oomkit.decide", _decide_and_report, "dir"),
        ("runs-list", "oomkit.runs", _list_runs, "runs"),
    )
    for name, module, func, layout in optional:
        try:
            mod = importlib.import_module(module)
            found[name] = (func if callable(func) else getattr(mod, func), layout)
        except (ImportError, AttributeError):
            continue  # that stage is not in the tree yet
    return found


def _report_of(path: Path) -> None:
    """What `oomkit report` does with an imported result or a run folder, rendered in memory."""
    from oomkit.report import render

    for fmt in ("html", "md"):
        render(str(path), fmt, out=str(path.parent / f"fuzz-report.{fmt}"), now="2026-01-01T00:00:00+00:00")


def _decide_and_report(path: Path) -> None:
    from oomkit.decide import DecideOptions, decide

    # The forecast is left out: it imports vLLM and torch (seconds of CPU, over the per-input limit) and
    # runs a simulation with its own time and step limits (tests/test_forecast*.py feed it bad input);
    # what this harness fuzzes is how decide and report read the files.
    options = DecideOptions(runs_dir=str(path.parent), write=False, forecast=False)
    decide([str(path)], str(REQUIREMENTS), options).to_dict()
    _report_of(path)


def _list_runs(runs_dir: Path) -> None:
    from oomkit.runs import list_runs, render

    render(list_runs(runs_dir, include_parts=True))


# --- seeds: real files per reader ------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    data: bytes
    name: str = "input"
    """The file the mutated bytes are written to."""
    base: Path | None = None
    """A real folder (run folder, env capture) copied around that file."""


def _glob(*patterns: str) -> list[Path]:
    out: list[Path] = []
    for pat in patterns:
        base = SHARED if pat.startswith("shared/") else ROOT
        out += sorted(base.glob(pat.removeprefix("shared/")))
    return [p for p in out if p.is_file()]


_GUIDELLM = {
    "benchmarks": [
        {
            "args": {"strategy": {"type_": "concurrent", "streams": 4}},
            "metrics": {
                "time_to_first_token_ms": {"successful": {"mean": 40, "median": 35, "percentiles": {"p99": 80}}},
                "requests_per_second": {"successful": {"mean": 3.2}},
            },
        }
    ],
    "config": {"model": "tiny", "data": "prompt_tokens=128"},
}
_FOLDER_FILES = ("manifest.json", "ladder.json", "compare.json", "metrics.jsonl")  # what decide and report read


def _in_folders(folders: list[Path], names: tuple[str, ...]) -> list[Seed]:
    return [Seed((d / n).read_bytes(), n, d) for d in folders for n in names if (d / n).is_file()]


def _seeds() -> dict[str, list[Seed]]:
    logs = _glob("shared/research/cpu-logs/*.log", "shared/fixtures/vllm-logs/*.log", "tests/fixtures/excerpts/*.log")
    runs = sorted(p.parent for p in (ROOT / "tests/fixtures/decide").glob("**/manifest.json"))
    envs = sorted(p for p in (ROOT / "tests/fixtures/env").iterdir() if p.is_dir())
    files = {
        "logs": logs,
        "recipe": _glob("shared/fixtures/recipes/*.yaml"),
        "nvsmi-xml": _glob("tests/fixtures/env/*/nvidia-smi-q.xml"),
        "nvsmi-topo": _glob("tests/fixtures/env/*/topo-m.txt"),
        "profile": _glob("examples/testbed-*.yaml"),
        "workload": _glob("examples/workload-*.yaml"),
        "requirements": _glob("examples/requirements-*.yaml"),
        "experiment": _glob("examples/experiment-*.yaml"),
        "request-set": _glob("tests/fixtures/decide/*/request-set.jsonl"),
    }
    seeds = {
        k: [Seed(p.read_bytes()[:SEED_BYTES] if k == "logs" else p.read_bytes()) for p in v] for k, v in files.items()
    }
    seeds["model-config"] = [Seed(p.read_bytes(), "config.json") for p in _glob("shared/fixtures/model-configs/*.json")]
    seeds["env-dir"] = [Seed(f.read_bytes(), f.name, d) for d in envs for f in sorted(d.iterdir())]
    seeds["import"] = [Seed(p.read_bytes()) for p in _glob("tests/fixtures/decide/imports/*.json")]
    seeds["import"].append(Seed(json.dumps(_GUIDELLM).encode()))
    seeds["run-folder"] = _in_folders(runs, _FOLDER_FILES)
    seeds["runs-list"] = _in_folders(runs, ("manifest.json",))
    return {k: v for k, v in seeds.items() if v}


# --- mutators --------------------------------------------------------------------------------

ANSI = (b"\x1b[31m", b"\x1b[0m", b"\x1b[2K\r", b"\x1b]0;title\x07", b"\x1b[?25l")


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [data]


def cut(rng: random.Random, data: bytes, other: bytes) -> bytes:
    a = rng.randrange(len(data) + 1)
    return data[:a] if rng.random() < 0.6 else data[a:]


def splice(rng: random.Random, data: bytes, other: bytes) -> bytes:
    return data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1) :]


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
        junk = rng.choice(
            ANSI + (b"\x00", b"\x00" * 64, b"\r", b"\xff\xfe", b"\xef\xbb\xbf", b"\\ud800", b"\xed\xa0\x80")
        )
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


def nest(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """Deep nesting: recursive parsers (PyYAML's composer, json) and recursive walkers."""
    pos = rng.randrange(len(data) + 1)
    unit = rng.choice((b"[", b"{", b'{"a": ', b"a: {", b"- ", b"<a>", b"&x [*x, "))
    return data[:pos] + unit * rng.choice((40, 400, 5_000, 50_000)) + data[pos:]


_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?")
HUGE = (
    b"9" * 5_000,
    b"1e999",
    b"-1e999",
    b"-0",
    b"NaN",
    b"Infinity",
    b"1" + b"0" * 400,
    b"0x" + b"f" * 64,
    b"2026-13-45",
    b"2026-01-01 25:61:61",
    b"!!int x",
    b"!!timestamp x",
    b"1_000_000",
    b".inf",
    b"1e-400",
)


def number(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """A number in the text becomes a huge, special or malformed one (int parsing has a 4,300-digit limit)."""
    found = list(_NUMBER.finditer(data[:200_000]))
    if not found:
        return data + rng.choice(HUGE)
    m = rng.choice(found)
    return data[: m.start()] + rng.choice(HUGE) + data[m.end() :]


def bomb(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """A YAML alias bomb (each level repeats the one before ten times) or an alias inside itself."""
    if rng.random() < 0.3:
        return data + b"\nloop: &loop [*loop]\n"
    levels = [b"l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [b"l%d: &l%d [%s]" % (i, i, b", ".join([b"*l%d" % (i - 1)] * 10)) for i in range(1, rng.randint(3, 9))]
    return data.rstrip(b"\n") + b"\n" + b"\n".join(levels) + b"\n"


def empty(rng: random.Random, data: bytes, other: bytes) -> bytes:
    return rng.choice((b"", b"\n", b"\x00", b" \t\n", b"\xef\xbb\xbf", b"\x1f\x8b\x08\x00"))


# Random structured documents: parse the seed, then replace, drop or add values at random.
WEIRD = (
    None,
    True,
    0,
    -1,
    2**63,
    1e308,
    float("nan"),
    float("inf"),
    "",
    "x" * 300,
    "../../etc",
    "0.10",
    [],
    {},
    [None],
    {"": None},
    "\x00",
    "${HOME}",
    "-1GiB",
    "inf",
    3.5,
    "\ud800",
    "\u202e",
    "<script>x</script>",
)


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.6:
        return rng.choice(WEIRD)
    if roll < 0.8:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {
        rng.choice(("name", "model", "args", "x", "1", "state", "schema", 0, None)): _random_value(rng, depth + 1)
        for _ in range(rng.randint(0, 4))
    }


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


def _dump(tree: Any, as_json: bool) -> bytes:
    if as_json:
        return json.dumps(tree, default=str).encode("utf-8", errors="surrogatepass")
    return yaml.safe_dump(tree, allow_unicode=True, sort_keys=False).encode("utf-8", errors="surrogatepass")


def structured(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """Parse the seed (YAML, JSON, or one line of JSONL), mutate the tree, write it back."""
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    as_json = text.lstrip().startswith(("{", "["))
    jsonl = as_json and len(lines) > 1 and lines[0].rstrip().endswith("}") and lines[1].lstrip().startswith("{")
    i = rng.randrange(len(lines)) if jsonl else 0
    try:
        tree = json.loads(lines[i] if jsonl else text) if as_json else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return flip(rng, data, other)
    for _ in range(rng.randint(1, 4)):
        tree = _mutate_tree(rng, tree)
    try:  # YAML aliases share nodes, so a mutation can make the tree refer to itself
        dumped = _dump(tree, as_json or jsonl)
    except (ValueError, RecursionError, yaml.YAMLError):
        return flip(rng, data, other)
    if not jsonl:
        return dumped
    return "".join(lines[:i]).encode() + dumped + b"\n" + "".join(lines[i + 1 :]).encode()


MUTATORS: dict[str, Callable[[random.Random, bytes, bytes], bytes]] = {
    f.__name__: f for f in (cut, splice, flip, duplicate, reorder, inject, giant, nest, number, bomb, empty, structured)
}


# --- running ---------------------------------------------------------------------------------


@dataclass
class Tally:
    tried: int = 0
    crashes: int = 0
    hangs: int = 0
    documented: int = 0
    slowest_cpu_s: float = 0.0
    sites: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Where the crashes and hangs happened: "kind at file:line" -> count and the first example."""

    def add(self, other: Tally) -> None:
        self.tried += other.tried
        self.crashes += other.crashes
        self.hangs += other.hangs
        self.documented += other.documented
        self.slowest_cpu_s = max(self.slowest_cpu_s, other.slowest_cpu_s)
        for site, found in other.sites.items():
            mine = self.sites.setdefault(site, {**found, "count": 0})
            mine["count"] += found["count"]


def _place(work: Path, layout: str, seed: Seed, data: bytes) -> Path:
    if layout == "file":
        target = work / seed.name
        target.write_bytes(data)
        return target
    folder = work / "runs" / RUN_ID
    shutil.rmtree(work / "runs", ignore_errors=True)
    if seed.base:
        shutil.copytree(seed.base, folder, copy_function=shutil.copyfile)
    else:
        folder.mkdir(parents=True)
    (folder / seed.name).write_bytes(data)
    return folder.parent if layout == "runs" else folder


def _where(err: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/oomkit/" in f.filename] or traceback.extract_tb(
        err.__traceback__
    )
    last = frames[-1] if frames else None
    return f"{Path(last.filename).name}:{last.lineno}" if last else "?"


def run_one(
    reader: Callable[[Path], Any], path: Path, limit_s: float, wall_s: float
) -> tuple[str, BaseException | None, float]:
    """(outcome, error, CPU seconds). SIGPROF fires after limit_s of this process's CPU time (user +
    system), so a loaded machine does not turn a slow parse into a hang; SIGALRM after wall_s of wall
    time catches a reader that blocks without using CPU."""
    from oomkit.errors import OomkitError

    start = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, limit_s)
    signal.setitimer(signal.ITIMER_REAL, wall_s)
    try:
        reader(path)
        outcome, error = "ok", None
    except Hang as err:
        outcome, error = "hang", err
    except OomkitError:
        outcome, error = "documented", None
    except (Exception, RecursionError, SystemExit) as err:  # noqa: BLE001 — anything else is a crash we count
        outcome, error = "crash", err
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
    return outcome, error, time.process_time() - start


def _init_worker(memory_gib: float) -> None:
    signal.signal(signal.SIGPROF, _on_timer)
    signal.signal(signal.SIGALRM, _on_timer)
    if memory_gib > 0:  # a reader that allocates without bound fails with MemoryError, not the machine
        limit = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _chunk(args: tuple[int, int, float, float, str | None]) -> dict[str, Tally]:
    count, seed, limit_s, wall_s, keep_dir = args
    readers, seeds = _readers(), _seeds()
    names = [n for n in readers if n in seeds]
    rng = random.Random(seed)
    tallies = {n: Tally() for n in names}
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="oomkit-fuzz-", dir=shm) as tmp:
        for i in range(count):
            name = names[i % len(names)]
            reader, layout = readers[name]
            pool = seeds[name]
            seed_file = rng.choice(pool)
            other = rng.choice([s for s in pool if s.name == seed_file.name])
            mut = rng.choice(list(MUTATORS))
            data = MUTATORS[mut](rng, seed_file.data, other.data)
            outcome, err, cpu_s = run_one(reader, _place(Path(tmp), layout, seed_file, data), limit_s, wall_s)
            t = tallies[name]
            t.tried += 1
            t.slowest_cpu_s = max(t.slowest_cpu_s, cpu_s)
            t.documented += outcome == "documented"
            if outcome not in ("crash", "hang"):
                continue
            t.crashes += outcome == "crash"
            t.hangs += outcome == "hang"
            site = t.sites.setdefault(
                f"{outcome} at {_where(err)}",
                {
                    "count": 0,
                    "example": f"{mut} of {seed_file.name}, {len(data):,} bytes: {type(err).__name__}: {str(err)[:160]}",
                },
            )
            site["count"] += 1
            if keep_dir:
                out = Path(keep_dir) / f"{name}-{seed}-{i}-{mut}-{seed_file.name}"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data)
                out.with_name(out.name + ".where.json").write_text(
                    json.dumps({"reader": name, "seed_file": seed_file.name, "base": str(seed_file.base or "")})
                )
    return tallies


def replay(keep_dir: Path, limit_s: float = 5.0, wall_s: float = 60.0) -> list[tuple[str, str, str]]:
    """Run every input saved by --keep again: (input, reader, outcome or crash site), e.g. after a fix."""
    _init_worker(0)
    readers, out = _readers(), []
    for where in sorted(keep_dir.glob("*.where.json")):
        info, data = json.loads(where.read_text()), where.with_name(where.name[: -len(".where.json")]).read_bytes()
        seed = Seed(data, info["seed_file"], Path(info["base"]) if info["base"] else None)
        reader, layout = readers[info["reader"]]
        with tempfile.TemporaryDirectory(prefix="oomkit-replay-") as tmp:
            outcome, err, _ = run_one(reader, _place(Path(tmp), layout, seed, data), limit_s, wall_s)
        detail = f"{outcome} at {_where(err)}: {type(err).__name__}: {str(err)[:120]}" if err else outcome
        out.append((where.name[: -len(".where.json")], info["reader"], detail))
    return out


def fuzz(
    count: int,
    workers: int = 2,
    seed: int = 0,
    limit_s: float = 5.0,
    wall_s: float = 60.0,
    keep_dir: str | None = None,
    memory_gib: float = 4.0,
    progress: bool = False,
) -> dict[str, Tally]:
    """Run `count` inputs in chunks over `workers` processes; per-reader tallies. The inputs depend
    only on `seed` and `count`, not on the number of workers."""
    jobs = [
        (min(CHUNK, count - start), seed * 100_000 + start // CHUNK, limit_s, wall_s, keep_dir)
        for start in range(0, count, CHUNK)
    ]
    total: dict[str, Tally] = {}
    begun, done = time.monotonic(), 0
    with ProcessPoolExecutor(max(1, workers), initializer=_init_worker, initargs=(memory_gib,)) as pool:
        for job, part in zip(jobs, pool.map(_chunk, jobs), strict=False):
            for name, t in part.items():
                total.setdefault(name, Tally()).add(t)
            done += job[0]
            if progress:
                print(f"  {done:,}/{count:,} inputs, {time.monotonic() - begun:.0f} s", file=sys.stderr, flush=True)
    return total


# --- the server part: faults and secrets, by benchmarks/faults.py and benchmarks/secrets_scan.py ---

NOT_RUN = "not run (needs --with-server: vLLM CPU)"


def with_server(workdir: Path) -> dict[str, Any]:
    """run_faults and run_secrets against the real vLLM CPU server; each part is its dict or an error line."""
    out: dict[str, Any] = {}
    for key, module, func in (("faults", "faults", "run_faults"), ("secrets", "secrets_scan", "run_secrets")):
        sub = workdir / key
        sub.mkdir(parents=True, exist_ok=True)
        try:
            call = getattr(__import__(module), func)
        except (ImportError, AttributeError) as err:
            out[key] = f"not available (benchmarks/{module}.py: {type(err).__name__}: {err})"
            continue
        try:
            out[key] = call(sub)
        except Exception as err:  # noqa: BLE001 — a failed part is reported in the table, not a traceback
            out[key] = f"failed ({type(err).__name__}: {str(err)[:200]})"
    return out


def summary_rows(
    total: dict[str, Tally], server: dict[str, Any] | None, args: argparse.Namespace
) -> list[tuple[str, str]]:
    tried = sum(t.tried for t in total.values())
    faults = (server or {}).get("faults", NOT_RUN)
    secrets = (server or {}).get("secrets", NOT_RUN)
    rows = [
        ("inputs tried", f"{tried:,} ({len(total)} readers, seed {args.seed})"),
        ("crashes", f"{sum(t.crashes for t in total.values()):,}"),
        (f"hangs (over {args.limit_s:g} s CPU or {args.wall_s:g} s wall)", f"{sum(t.hangs for t in total.values()):,}"),
    ]
    if isinstance(faults, dict):
        rows += [
            ("faults injected / survived", f"{faults['faults_injected']:,} / {faults['faults_survived']:,}"),
            ("records lost", f"{faults['records_lost']:,}"),
        ]
    else:
        rows += [("faults injected / survived", faults), ("records lost", faults)]
    if isinstance(secrets, dict):
        rows.append(
            (
                "secrets leaked",
                f"{secrets['secrets_leaked']:,} ({secrets['secrets_planted']:,} planted, "
                f"{secrets['places_scanned']:,} places scanned)",
            )
        )
    else:
        rows.append(("secrets leaked", secrets))
    rows.append(("command", f"`{command_line(args)}`"))
    return rows


def command_line(args: argparse.Namespace) -> str:
    parts = [".venv/bin/python benchmarks/robustness.py", f"-n {args.count}", f"--workers {args.workers}"]
    parts += [f"--seed {args.seed}"] if args.seed else []
    parts += ["--with-server"] if args.with_server else []
    return " ".join(parts + ["--markdown"])


def _table(head: tuple[str, ...], rows: list[tuple[Any, ...]], markdown: bool) -> list[str]:
    cells = [
        [f"{c:,}" if isinstance(c, int) else f"{c:.2f}" if isinstance(c, float) else str(c) for c in r] for r in rows
    ]
    if markdown:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in cells]
    widths = [max(len(x) for x in col) for col in zip(head, *cells, strict=False)]
    numeric = [all(re.fullmatch(r"[\d,.]+", r[i]) for r in cells) for i in range(len(head))]
    fmt = "  ".join(f"{{:>{w}}}" if numeric[i] and i else f"{{:<{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*head)] + [fmt.format(*r) for r in cells]


def render(
    total: dict[str, Tally], seconds: float, server: dict[str, Any] | None, args: argparse.Namespace, markdown: bool
) -> str:
    rows: list[tuple[Any, ...]] = [
        (n, t.tried, t.documented, t.crashes, t.hangs, t.slowest_cpu_s) for n, t in sorted(total.items())
    ]
    rows.append(
        ("all readers", *(sum(r[i] for r in rows) for i in range(1, 5)), max((r[5] for r in rows), default=0.0))
    )
    head = ("reader", "inputs tried", "documented errors", "crashes", "hangs", "slowest input (CPU s)")
    lines = _table(head, rows, markdown)
    lines.append(f"\n{rows[-1][1]:,} inputs in {seconds:.0f} s wall, {args.workers} worker processes\n")
    for name, t in sorted(total.items()):
        for site, found in sorted(t.sites.items(), key=lambda kv: -kv[1]["count"]):
            lines.append(f"  {name}: {found['count']:,} x {site} ({found['example']})")
    lines += [""] + _table(("issue 7 figure", "value"), summary_rows(total, server, args), markdown)
    faults = (server or {}).get("faults")
    if isinstance(faults, dict):  # each scenario, and why one was not survived
        from faults import render as render_faults

        lines += ["", "Fault scenarios (benchmarks/faults.py):", "", "```", render_faults(faults), "```"]
    return "\n".join(lines)


def write_doc(path: Path, body: str) -> None:
    """Replace what stands between the robustness markers in `path`, nothing else."""
    text = path.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"{path}: needs one {BEGIN} line followed by one {END} line")
    head, rest = text.split(BEGIN)
    path.write_text(f"{head}{BEGIN}\n{body.strip()}\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")


def failed(total: dict[str, Tally], server: dict[str, Any] | None) -> bool:
    if any(t.crashes or t.hangs for t in total.values()):
        return True
    faults, secrets = (server or {}).get("faults"), (server or {}).get("secrets")
    if server is not None and not (isinstance(faults, dict) and isinstance(secrets, dict)):
        return True
    return bool(
        isinstance(faults, dict)
        and (faults["records_lost"] or faults["faults_survived"] < faults["faults_injected"])
        or isinstance(secrets, dict)
        and secrets["secrets_leaked"]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--count", type=int, default=100_000, help="inputs to try (default 100000)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit-s", type=float, default=5.0, help="CPU seconds an input may use; past it is a hang")
    ap.add_argument("--wall-s", type=float, default=60.0, help="wall seconds an input may take; past it is a hang")
    ap.add_argument("--memory-gib", type=float, default=4.0, help="address-space limit per worker (0: none)")
    ap.add_argument("--keep", metavar="DIR", help="save every crashing or hanging input here")
    ap.add_argument(
        "--with-server",
        action="store_true",
        help="then run benchmarks/faults.py and benchmarks/secrets_scan.py against the vLLM CPU server",
    )
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    ap.add_argument(
        "--write-doc",
        metavar="FILE",
        type=Path,
        help=f"also write the Markdown tables between {BEGIN} and {END} in FILE",
    )
    ap.add_argument("--replay", metavar="DIR", type=Path, help="only run again the inputs that --keep saved in DIR")
    args = ap.parse_args(argv)
    if args.replay:
        rows = replay(args.replay, args.limit_s, args.wall_s)
        print("\n".join(_table(("input", "reader", "outcome"), rows, args.markdown)) if rows else "nothing kept")
        return 1 if any(r[2].startswith(("crash", "hang")) for r in rows) else 0
    start = time.monotonic()
    try:
        total = fuzz(
            args.count, args.workers, args.seed, args.limit_s, args.wall_s, args.keep, args.memory_gib, progress=True
        )
    except BrokenProcessPool:
        print(
            "a worker process died (killed, or crashed in C code): its last input is under "
            "/dev/shm/oomkit-fuzz-*/; rerun with --workers 1 to find it",
            file=sys.stderr,
        )
        return 1
    seconds = time.monotonic() - start
    server = None
    if args.with_server:
        with tempfile.TemporaryDirectory(prefix="oomkit-robustness-") as tmp:
            server = with_server(Path(tmp))
    print(render(total, seconds, server, args, args.markdown))
    if args.write_doc:
        write_doc(args.write_doc, render(total, seconds, server, args, markdown=True))
    return 1 if failed(total, server) else 0


if __name__ == "__main__":
    sys.exit(main())
