"""`oomkit bench`: target load with server metrics, peak memory, agent success and goodput."""

from __future__ import annotations

import json
import re
import sys

import click

from oomkit.bench import BenchOptions, bench
from oomkit.bench.render import render
from oomkit.commands.ladder import common, target_options
from oomkit.commands.options import ray_option
from oomkit.errors import RunFailed, UsageError
from oomkit.loadrun.progress import LineProgress
from oomkit.redact import redact

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")


def duration_s(text: str | None) -> float | None:
    if text is None:
        return None
    m = _DURATION.match(text)
    if not m:
        raise UsageError(f"--duration {text!r}: expected seconds, or a number with s, m or h (e.g. 90s, 5m)")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2) or "s"]


@click.command("bench")
@target_options
@click.option("--workload", help="Workload YAML, or a request-set.jsonl to reuse unchanged (required).")
@click.option("--concurrency", type=int, help="Agent sessions running at once (required).")
@click.option("--sessions", type=int, help="Sessions to run (default: each session of the set once).")
@click.option("--duration", help="Run this long instead (e.g. 90s, 5m), repeating the sessions.")
@click.option(
    "--clients",
    type=int,
    default=1,
    show_default=True,
    help="Client processes that stream the requests (sessions split among them); one run folder.",
)
@ray_option("the --clients as actors across the cluster")
def command(workload, concurrency, sessions, duration, clients, ray_address, **kw):
    """Target load: client latency, /metrics deltas, peak memory, agent-loop success, goodput."""
    spec, client, slos = common(kw)
    opts = BenchOptions(concurrency, sessions, duration_s(duration), slos, clients, ray_address)
    result = bench(spec, workload, opts, client, LineProgress(sys.stderr, enabled=not kw["as_json"]), kw["resume"])
    click.echo(redact(json.dumps(result.to_dict(), indent=2, default=str)) if kw["as_json"] else redact(render(result)))
    if result.died and result.ran:
        f = result.failure
        why = f"{f.kind}: {f.reason}" if f else "the server stopped serving"
        raise RunFailed(
            f"the server died during the bench: {why}", hint=f"every finished request is in {result.run_dir}"
        )
