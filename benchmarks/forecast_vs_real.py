"""Backtest of `oomkit forecast` against real `oomkit ladder` runs on the vLLM CPU testbed: the
forecast of run A's concurrency rungs, with A's profile and A's request set, and the step time
calibrated on a *different* run B, next to what A measured, with the errors and the issue's goals
(knee equal +- one rung; preemption onset at the same concurrency; prefix-cache hit rate within
0.05; peak KV usage within 5 points; TTFT p50 and ITL p50 within 25%).

    .venv/bin/python benchmarks/forecast_vs_real.py                  # the two recorded small-KV ladders
    .venv/bin/python benchmarks/forecast_vs_real.py --real RUN_A --calibrate RUN_B
    flock /tmp/oomkit-vllm.lock .venv/bin/python benchmarks/forecast_vs_real.py --live  # + a new ladder now
    flock /tmp/oomkit-vllm.lock .venv/bin/python benchmarks/forecast_vs_real.py --profiles  # 4 testbeds, 2 ladders each
    .venv/bin/python benchmarks/forecast_vs_real.py --stored DIR   # the same, on the ladders a --profiles run left in DIR

`--profiles` backtests four CPU testbeds (small KV pool, prefix-heavy, long history, hybrid): for
each, two ladders now with the same workload and seed, and the forecast of each calibrated on the
other. Live ladders run a copy of the profile whose server also logs every scheduler step
(`enable_logging_iteration_details`, forecast_engine_truth.py), so the engine's own per-step KV peak
and the requests it had at once are known per rung.

The forecast runs the ladder's own rungs in the ladder's order: the doubling rungs the ladder ran,
then its bisection (refine), with the profile's prefix-cache retention interval.

Measured figures come from A's files: preemptions per rung from ladder.json (/metrics deltas); KV
usage two ways, `kv_step_peak` (the engine's log, against the forecast's max_kv_usage: the peak of
every step) and `kv_scraped` (ladder.json's max_kv_usage, /metrics read about once a second, against
the forecast's max_kv_usage_sampled); the prefix-cache hit rate from the counters in metrics.jsonl;
TTFT and ITL from requests.jsonl. The CPU testbed's streams are often read in bursts (gaps of 0, or
the whole answer in one read), so the measured ITL is each request's time per output token after the
first, (latency - TTFT) / (tokens - 1), and answers read in one piece are left out.

Each comparison also prints the reference for the timing goals: the other ladder's own TTFT and ITL
p50 (the same profile, workload and seed, measured again) read as if it were the forecast; `--profiles`
and `--stored` end with its TTFT count. Two real runs that differ by more than 25% bound what any
forecast can meet.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from forecast_engine_truth import EngineWindow, engine_windows, with_step_log

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "decide"
PAIRS = [
    (FIXTURES / "investigation-small-kv" / "ladder", FIXTURES / "ladder-small-kv"),
    (FIXTURES / "ladder-small-kv", FIXTURES / "investigation-small-kv" / "ladder"),
]
EXAMPLES = REPO / "examples"
LIVE_PROFILE = EXAMPLES / "testbed-small-kv.yaml"
LIVE_WORKLOAD = EXAMPLES / "workload-testbed.yaml"
# Long history: the testbed workload with twice the steps and longer tool results (fits 2,048).
LONG_HISTORY = "extends: {base}\nname: testbed-long-history\nsteps: 6\nhistory: {{tool_result_tokens: 120}}\n"
BACKTEST_PROFILES = (
    ("small KV pool", "testbed-small-kv.yaml", "workload-testbed.yaml"),
    ("prefix-heavy", "testbed-prefix-cache.yaml", "workload-testbed.yaml"),
    ("long history", "testbed-prefix-cache.yaml", "long-history"),
    ("hybrid", "testbed-hybrid-small-kv.yaml", "workload-testbed-greedy.yaml"),
)
HITS, QUERIES = 'vllm:prefix_cache_hits_total{engine="0"}', 'vllm:prefix_cache_queries_total{engine="0"}'


def measured(run: Path) -> dict[int, dict[str, Any]]:
    ladder = json.loads((run / "ladder.json").read_text())
    step = next(s for s in ladder["steps"] if s["name"] == "concurrency")
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines() if line.strip()]
    samples = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    engine = engine_windows(run)
    out = {}
    for rung in step["detail"]["rungs"]:
        c, label = rung["concurrency"], f"concurrency_c{rung['concurrency']}"
        recs = [r for r in records if r.get("label") == label and r.get("ok")]
        # An answer that arrived in one read (TTFT = latency) measures the whole response, not its
        # first token: such records are left out of TTFT and ITL.
        streamed = [r for r in recs if _tpot(r)]
        seen = engine.get(label, EngineWindow()) if engine else None
        out[c] = {
            "verdict": rung["verdict"],
            "preemptions": rung["detail"]["preemptions"],
            "kv_step_peak": seen.kv_peak if seen else None,
            "kv_scraped": rung["detail"]["max_kv_usage"],
            "prefix_hit_rate": _hit_rate([s for s in samples if s.get("label") == label]),
            "ttft_ms_p50": _median([r["ttft_ms"] for r in streamed]),
            "itl_ms_p50": _median([_tpot(r) for r in streamed]),
            "streamed": f"{len(streamed)}/{len(recs)}",
            "most_scheduled": seen.most_scheduled if seen else None,
        }
    order = [r["concurrency"] for r in step["detail"]["rungs"]]
    return {**out, 0: {"knee": step["detail"]["knee"], "order": order}}


def _hit_rate(samples: list[dict[str, Any]]) -> float | None:
    if len(samples) < 2:
        return None
    first, last = samples[0]["samples"], samples[-1]["samples"]
    queries = last.get(QUERIES, 0) - first.get(QUERIES, 0)
    return (last.get(HITS, 0) - first.get(HITS, 0)) / queries if queries else None


def _tpot(r: dict[str, Any]) -> float | None:
    out = r.get("output_tokens") or 0
    return (r["latency_ms"] - r["ttft_ms"]) / (out - 1) if out > 1 and r.get("latency_ms") else None


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def forecast_of(real: Path, calibrate_on: Path, order: list[int]) -> Any:
    """The forecast of `real`'s rungs: the doubling rungs the ladder ran, then the forecast's own
    bisection, as the ladder bisects (so the rungs run in the ladder's order when the knees agree)."""
    from oomkit.forecast import ForecastRequest, forecast, plan_request
    from oomkit.forecast.inputs import retention_of

    manifest = json.loads((real / "manifest.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "profile.yaml"
        profile.write_text(yaml.safe_dump(manifest["profile"]), encoding="utf-8")
        req = ForecastRequest(
            plan=plan_request(str(profile), {}),
            workload=str(real / "request-set.jsonl"),
            concurrency=tuple(_doubling(order)),
            calibrate_run=str(calibrate_on),
            prefix_cache_retention_interval=retention_of(str(profile)),
        )
        return forecast(req)


def _doubling(order: list[int]) -> list[int]:
    """The rungs a ladder ran before it bisected: 1, 2, 4, ... as far as it went."""
    out = order[:1]
    for c in order[1:]:
        if c != 2 * out[-1]:
            break
        out.append(c)
    return out


def compare(real: Path, calibrate_on: Path, reference: list[bool] | None = None) -> list[bool]:
    """The goal checks of `real`'s forecast; `reference` gathers the re-measurement's TTFT checks."""
    real_figs = measured(real)
    head = real_figs.pop(0)
    knee_real = head["knee"]
    f = forecast_of(real, calibrate_on, head["order"])
    lay = f.layouts[0]
    print(f"\nreal: {_short(real)}   step time calibrated on: {_short(calibrate_on)}")
    print(f"{'c':>3} {'figure':<16} {'real':>10} {'forecast':>10} {'error':>10}")
    checks = []
    for rung in lay.rungs:
        m = real_figs.get(rung.concurrency)
        if m is None:
            print(f"{rung.concurrency:>3} (the ladder did not run this rung)")
            continue
        for key, fc_key, tol, kind in FIGURES:
            fc = getattr(rung, fc_key)
            err, ok = _error(m[key], fc, tol, kind)
            if ok is not None:
                checks.append(ok)
            mark = "" if ok is None else (" ok" if ok else " MISS")
            print(f"{rung.concurrency:>3} {key:<16} {_fmt(m[key]):>10} {_fmt(fc):>10} {err:>10}{mark}")
    line, ttft_checks = _remeasured(real_figs, calibrate_on)
    print(line)
    if reference is not None:
        reference += ttft_checks
    knee_ok = _knee_ok(knee_real, lay.knee.to_dict())
    onset_real = min((c for c, m in real_figs.items() if m["preemptions"]), default=None)
    onset_fc = min((r.concurrency for r in lay.rungs if r.preemptions), default=None)
    print("streamed answers used for TTFT/ITL: " + ", ".join(f"c{c} {m['streamed']}" for c, m in real_figs.items()))
    if any(m["most_scheduled"] is not None for m in real_figs.values()):
        held = ", ".join(f"c{c} {m['most_scheduled']}" for c, m in real_figs.items())
        print(f"most requests the engine scheduled in one step (its log): {held}")
    print(f"knee: real {knee_real}, forecast {lay.knee.to_dict()} -> {'ok' if knee_ok else 'MISS'}")
    print(
        f"preemption onset: real c={onset_real}, forecast c={onset_fc} -> {'ok' if onset_real == onset_fc else 'MISS'}"
    )
    return [*checks, knee_ok, onset_real == onset_fc]


def _remeasured(real_figs: dict[int, dict[str, Any]], other: Path) -> tuple[str, list[bool]]:
    """The reference the timing goals are read against: the other ladder's own TTFT and ITL p50 (the
    same profile, workload and seed, measured again) as if it were the forecast. Where two real runs
    differ by more than 25%, no forecast can be within 25% of both. Returns the line and the TTFT checks."""
    try:
        again = measured(other)
    except (OSError, KeyError, StopIteration, ValueError):
        return "re-measured: the other ladder's figures could not be read", []
    parts, checks = [], {}
    for key in ("ttft_ms_p50", "itl_ms_p50"):
        pairs = [(m[key], again[c][key]) for c, m in real_figs.items() if c in again and m[key] and again[c].get(key)]
        checks[key] = [abs(y / x - 1) <= 0.25 for x, y in pairs]
        parts.append(f"{key} {sum(checks[key])}/{len(pairs)}")
    line = "re-measured (the other ladder's own figure as the forecast), within 25%: " + ", ".join(parts)
    return line, checks["ttft_ms_p50"]


FIGURES = (  # measured key, forecast attribute, tolerance, kind
    ("preemptions", "preemptions", None, "count"),
    ("kv_step_peak", "max_kv_usage", 0.05, "points"),
    ("kv_scraped", "max_kv_usage_sampled", 0.05, "points"),
    ("prefix_hit_rate", "prefix_hit_rate", 0.05, "points"),
    ("ttft_ms_p50", "ttft_ms_p50", 0.25, "relative"),
    ("itl_ms_p50", "itl_ms_p50", 0.25, "relative"),
)


def _error(real: Any, fc: Any, tol: float | None, kind: str) -> tuple[str, bool | None]:
    if real is None or fc is None:
        return "-", None
    if kind == "count":
        return f"{fc - real:+.0f}", None
    if kind == "points":
        diff = fc - real
        return f"{diff * 100:+.1f} pt", abs(diff) <= tol if tol is not None else None
    rel = (fc - real) / real if real else float("inf")
    return f"{rel * 100:+.0f}%", abs(rel) <= tol if tol is not None else None


def _knee_ok(real: dict[str, Any], fc: dict[str, Any]) -> bool:
    if real["concurrency"] is None or fc["concurrency"] is None:
        return real["concurrency"] == fc["concurrency"]
    return abs(real["concurrency"] - fc["concurrency"]) <= 1


def _short(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _fmt(v: Any) -> str:
    return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def live_ladder(runs_dir: Path, profile: Path = LIVE_PROFILE, workload: Path = LIVE_WORKLOAD) -> Path:
    """One real ladder on the CPU testbed now (the caller holds /tmp/oomkit-vllm.lock), its server
    logging every scheduler step."""
    logged = with_step_log(profile, runs_dir)
    cmd = [sys.executable, "-m", "oomkit", "ladder", "--profile", str(logged), "--workload", str(workload)]
    cmd += ["--runs-dir", str(runs_dir), "--max-concurrency", "8", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=1800)
    if out.returncode not in (0, 1):
        raise SystemExit(f"the live ladder failed: {out.stderr[-600:]}")
    return Path(json.loads(out.stdout)["run_dir"])


def profile_pairs(runs_dir: Path) -> list[tuple[str, Path, Path]]:
    """Two ladders per backtest profile, the same workload and seed: (name, run A, run B)."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for name, profile, workload in BACKTEST_PROFILES:
        wl = EXAMPLES / workload
        if workload == "long-history":
            wl = runs_dir / "workload-long-history.yaml"
            wl.write_text(LONG_HISTORY.format(base=EXAMPLES / "workload-testbed.yaml"), encoding="utf-8")
        first, second = (live_ladder(runs_dir, EXAMPLES / profile, wl) for _ in range(2))
        out.append((name, first, second))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", type=Path, help="the ladder run to forecast")
    ap.add_argument("--calibrate", type=Path, help="another run of the same profile to fit the step time on")
    ap.add_argument("--live", action="store_true", help="also run a new ladder now and forecast it")
    ap.add_argument("--profiles", action="store_true", help="backtest four testbeds live (two ladders each)")
    ap.add_argument("--runs-dir", type=Path, default=Path(tempfile.gettempdir()) / "oomkit-forecast-backtest")
    ap.add_argument(
        "--stored",
        type=Path,
        metavar="DIR",
        help="forecast again the ladders a --profiles run left in DIR (its --runs-dir); runs no server",
    )
    args = ap.parse_args()
    if args.stored:
        return _profiles(stored_pairs(args.stored))
    pairs = [(args.real, args.calibrate)] if args.real and args.calibrate else list(PAIRS)
    if args.live:
        pairs.append((live_ladder(args.runs_dir), FIXTURES / "ladder-small-kv"))
    if args.profiles:
        return _profiles(profile_pairs(args.runs_dir))
    results = [ok for real, cal in pairs for ok in compare(real.resolve(), cal.resolve())]
    print(f"\ngoals met: {sum(results)}/{len(results)} checks")


def stored_pairs(runs_dir: Path) -> list[tuple[str, Path, Path]]:
    """The ladders of an earlier --profiles run, in the order it ran them: two per backtest profile."""
    runs = sorted(d for d in runs_dir.glob("*") if (d / "manifest.json").is_file())
    if len(runs) != 2 * len(BACKTEST_PROFILES):
        raise SystemExit(
            f"{runs_dir}: {len(runs)} run folders; a --profiles run leaves {2 * len(BACKTEST_PROFILES)} "
            "(two ladders per profile): pass the --runs-dir of one such run, holding nothing else"
        )
    out = []
    for i, (name, profile, _) in enumerate(BACKTEST_PROFILES):
        first, second = runs[2 * i], runs[2 * i + 1]
        if not all(Path(profile).stem in run.name for run in (first, second)):
            raise SystemExit(
                f"{runs_dir}: expected two ladders of {profile} for '{name}', found {first.name}, {second.name}"
            )
        out.append((name, first, second))
    return out


def _profiles(pairs: list[tuple[str, Path, Path]]) -> None:
    summary = []
    reference: list[bool] = []
    for name, first, second in pairs:
        print(f"\n=== {name} ===")
        checks: list[bool] = []
        for real, other in ((first, second), (second, first)):  # each ladder forecast, calibrated on the other
            try:
                checks += compare(real.resolve(), other.resolve(), reference)
            except Exception as err:  # noqa: BLE001 - one profile's failure is that profile's result
                print(f"forecast failed: {type(err).__name__}: {err}")
        summary.append(f"{name}: {sum(checks)}/{len(checks)}")
    print("\ngoals met per profile: " + "; ".join(summary))
    print(f"TTFT p50 of the other ladder (a re-measurement) within 25%: {sum(reference)}/{len(reference)} rungs")


if __name__ == "__main__":
    main()
