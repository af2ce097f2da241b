"""What the engine itself saw during each window of a ladder run, from its server log: a server
started with `enable_logging_iteration_details` logs one line per scheduler step (requests and
tokens scheduled, KV-cache usage after the step: vllm/v1/metrics/loggers.py, 0.32), and uvicorn logs
one `POST /v1/chat/completions` line per request as it starts. Taking the requests of requests.jsonl
in the order they started, the k-th POST line is the k-th request, so every step logged after it
belongs to that request's window (a ladder step or rung). Used by forecast_vs_real.py to compare
the forecast's per-step KV peak with the engine's, and to show how many requests a rung really had
in the engine at once (a starved client sends fewer than its concurrency)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ITERATION = re.compile(
    r"Iteration\(\d+\): (\d+) context requests, \d+ context tokens, (\d+) generation requests, "
    r"\d+ generation tokens, iteration elapsed time: [\d.]+ ms(?: \(dummy\))?, \w+ KV cache usage: ([\d.]+)%"
)
POST = '"POST /v1/chat/completions'
ARG = "enable_logging_iteration_details"


@dataclass
class EngineWindow:
    """One window's steps as the engine logged them."""

    steps: int = 0
    kv_peak: float = 0.0
    """The highest KV usage after any of its steps (vLLM's own figure, before /metrics sampling)."""
    most_scheduled: int = 0
    """The most requests scheduled in one step (prefill chunks and decodes; waiting ones excluded)."""


def engine_windows(run: Path) -> dict[str, EngineWindow]:
    """Per window label, what the engine logged; empty when the server did not log its steps."""
    log = run / "server.log"
    if not log.is_file():
        return {}
    labels = [str(r.get("label")) for r in _records(run / "requests.jsonl")]
    out: dict[str, EngineWindow] = {}
    posts = -1
    with open(log, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if POST in line:
                posts += 1
                continue
            m = ITERATION.search(line)
            if m is None or posts < 0 or not labels:
                continue
            w = out.setdefault(labels[min(posts, len(labels) - 1)], EngineWindow())
            w.steps += 1
            w.kv_peak = max(w.kv_peak, float(m.group(3)) / 100)
            w.most_scheduled = max(w.most_scheduled, int(m.group(1)) + int(m.group(2)))
    return out


def _records(path: Path) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sorted((r for r in rows if isinstance(r, dict)), key=lambda r: float(r.get("started_unix_s") or 0.0))


def with_step_log(profile: Path, out_dir: Path) -> Path:
    """A copy of the profile whose server logs every step (the only change), in out_dir."""
    import yaml

    doc = yaml.safe_load(profile.read_text(encoding="utf-8"))
    doc["args"] = {**doc.get("args", {}), ARG: True}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{profile.stem}-step-log.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path
