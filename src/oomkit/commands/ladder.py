"""`oomkit ladder`: the research-bench steps against a server, stopping at the first failure."""

from __future__ import annotations

import json
import sys

import click

from oomkit.client.chat import ClientOptions
from oomkit.errors import RunFailed
from oomkit.ladder import LadderOptions, ladder
from oomkit.ladder.render import render
from oomkit.ladder.run import death_text
from oomkit.loadrun.prepare import TargetSpec
from oomkit.loadrun.progress import LineProgress
from oomkit.loadrun.stats import parse_slos
from oomkit.redact import redact


def target_options(f):
    """Options shared with `oomkit bench`: where the server is and how to reach it."""
    for opt in reversed(
        [
            click.option("--profile", help="Launch profile YAML: oomkit starts the server, loads it, stops it."),
            click.option("--url", help="A running OpenAI-compatible server, e.g. http://127.0.0.1:8000."),
            click.option("--api-key", help="Bearer token (default: $OOMKIT_API_KEY or $OPENAI_API_KEY)."),
            click.option("--model", help="Served model name (default: the first one /v1/models lists)."),
            click.option(
                "--memory",
                default="auto",
                show_default=True,
                help="auto, nvml, rss, none, or the /metrics URL of a DCGM exporter.",
            ),
            click.option(
                "--slo",
                "slos",
                multiple=True,
                metavar="NAME=MS",
                help="ttft_ms=, tpot_ms= or latency_ms= bound (repeatable).",
            ),
            click.option("--timeout-s", type=float, default=600.0, show_default=True, help="Per-request limit."),
            click.option(
                "--stall-timeout-s",
                type=float,
                default=120.0,
                show_default=True,
                help="Longest silence inside one stream.",
            ),
            click.option(
                "--retries",
                type=int,
                default=0,
                show_default=True,
                help="Retries of a request refused or reset before its first token.",
            ),
            click.option(
                "--tool-retries",
                type=int,
                default=0,
                show_default=True,
                help="Retries of a request whose tool calls do not validate (counted).",
            ),
            click.option("--runs-dir", default="runs", show_default=True),
            click.option("--label", help="Name for the run folder."),
            click.option(
                "--resume",
                metavar="RUN",
                help="Continue a run that did not finish (folder, id or id prefix): "
                "what it finished is kept, the rest runs with its recorded target, requests and options.",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table."),
        ]
    ):
        f = opt(f)
    return f


def common(kw: dict) -> tuple[TargetSpec, ClientOptions, dict[str, float]]:
    spec = TargetSpec(kw["url"], kw["profile"], kw["api_key"], kw["model"], kw["runs_dir"], kw["label"], kw["memory"])
    client = ClientOptions(
        timeout_s=kw["timeout_s"],
        stall_timeout_s=kw["stall_timeout_s"],
        max_retries=kw["retries"],
        tool_retries=kw["tool_retries"],
    )
    return spec, client, parse_slos(kw["slos"])


@click.command("ladder")
@target_options
@click.option("--workload", help="Workload YAML, or a request-set.jsonl to reuse unchanged (default: built-in agent).")
@click.option("--max-concurrency", type=int, default=32, show_default=True)
@click.option("--max-history-doublings", type=int, default=6, show_default=True)
@click.option("--max-prompt-tokens", type=int, help="Stop doubling history before prompts exceed this.")
@click.option("--agent-steps", type=int, help="K: agent steps in step 3 and per session in each rung.")
@click.option("--expect-reasoning", is_flag=True, help="Fail step 1 unless reasoning comes back separated.")
def command(workload, max_concurrency, max_history_doublings, max_prompt_tokens, agent_steps, expect_reasoning, **kw):
    """Short request, tool call, agent steps, longer history, more concurrency (to the knee), repeat."""
    spec, client, slos = common(kw)
    opts = LadderOptions(max_concurrency, max_history_doublings, max_prompt_tokens, agent_steps, slos, expect_reasoning)
    result = ladder(spec, workload, opts, client, LineProgress(sys.stderr, enabled=not kw["as_json"]), kw["resume"])
    click.echo(redact(json.dumps(result.to_dict(), indent=2, default=str)) if kw["as_json"] else redact(render(result)))
    if result.server_died and result.ran:
        raise RunFailed(
            death_text(result), hint=f"the finished steps are kept; continue with --resume {result.run_dir}"
        )
    if result.failure and result.ran:
        raise RunFailed(
            f"ladder stopped at {result.stopped_at}: {result.failure.phase}: {result.failure.reason}",
            hint=f"see {result.run_dir}",
        )
