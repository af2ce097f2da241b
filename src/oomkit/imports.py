"""Evidence from other load tools, next to oomkit's own runs: `vllm bench serve --save-result`
JSON and GuideLLM `benchmarks.json`. Each becomes load points (one per concurrency level) with the
same figure names oomkit uses; percentiles the tool did not save are None, never guessed."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from oomkit.errors import InputError
from oomkit.fsio import JSON_ERRORS, json_object, read_text_limited
from oomkit.serial import Json, JsonObject, number_at, to_json_object

VLLM_BENCH, GUIDELLM = "vllm bench serve", "guidellm"


@dataclass(frozen=True)
class LoadPoint:
    label: str
    concurrency: float | None
    """Closed-loop concurrency (max_concurrency / concurrent streams); None for rate-driven loads."""
    request_rate: float | None
    requests: int
    errors: int
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    ttft_ms_p99: float | None
    latency_ms_p50: float | None
    latency_ms_p95: float | None
    latency_ms_p99: float | None
    output_tokens_per_s: float | None
    duration_s: float | None

    def to_dict(self) -> JsonObject:
        return to_json_object(self)


@dataclass(frozen=True)
class ImportedRun:
    tool: str
    path: str
    request_set_id: str
    """A fingerprint of the tool's dataset settings: runs with other data are another request set."""
    model: str | None
    points: tuple[LoadPoint, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return {
            "tool": self.tool,
            "path": self.path,
            "request_set_id": self.request_set_id,
            "model": self.model,
            "points": [p.to_dict() for p in self.points],
            "notes": list(self.notes),
        }


def _fingerprint(tool: str, data: JsonObject) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return f"{tool.split()[0]}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


# The tools' own fields, read as float()/int() read them (a number, or a number as text); any other
# shape is a TypeError, which read_import turns into one line of bad input.
def _float(value: Json) -> float:
    if isinstance(value, bool | int | float | str):
        return float(value)
    raise TypeError(f"a number expected, not {type(value).__name__}")


def _int(value: Json) -> int:
    if isinstance(value, bool | int | float | str):
        return int(value)
    raise TypeError(f"a number expected, not {type(value).__name__}")


def _object(value: Json) -> JsonObject:
    if isinstance(value, dict):
        return value
    raise TypeError(f"a JSON object expected, not {type(value).__name__}")


# A GuideLLM report keeps every request of every benchmark: tens of MB for a large sweep.
IMPORT_LIMIT_BYTES = 256 * 2**20
# Keys of `vllm bench serve` that describe what was sent (vllm/benchmarks/serve.py, datasets/).
VLLM_DATASET_KEYS = (
    "dataset_name",
    "dataset_path",
    "num_prompts",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "random_prefix_len",
    "seed",
    "tokenizer_id",
    "input_lens",
)
# Keys of a GuideLLM report's `config` that describe what was sent.
GUIDELLM_DATA_KEYS = ("data", "data_args", "data_samples", "processor", "random_seed")


def from_vllm_bench(data: JsonObject, path: str) -> ImportedRun:
    for key in ("completed", "mean_ttft_ms", "duration"):
        if key not in data:
            raise InputError(f"{path}: not a `vllm bench serve --save-result` file (no {key!r})")
    failed = _int(data.get("failed") or 0)
    completed = _int(data["completed"])
    rate = data.get("request_rate")
    point = LoadPoint(
        label=str(data.get("label") or f"max_concurrency={data.get('max_concurrency')}"),
        concurrency=number_at(data, "max_concurrency"),
        request_rate=None if rate in (None, "inf") else number_at(data, "request_rate"),
        requests=completed + failed,
        errors=failed,
        ttft_ms_p50=number_at(data, "median_ttft_ms"),
        ttft_ms_p95=number_at(data, "p95_ttft_ms"),
        ttft_ms_p99=number_at(data, "p99_ttft_ms"),
        latency_ms_p50=number_at(data, "median_e2el_ms"),
        latency_ms_p95=number_at(data, "p95_e2el_ms"),
        latency_ms_p99=number_at(data, "p99_e2el_ms"),
        output_tokens_per_s=number_at(data, "output_throughput"),
        duration_s=number_at(data, "duration"),
    )
    notes = []
    if point.ttft_ms_p95 is None:
        notes.append("no p95 saved: rerun with --metric-percentiles 50,95,99 --percentile-metrics ttft,tpot,itl,e2el")
    sent = {k: data.get(k) for k in VLLM_DATASET_KEYS if k in data}
    if "input_lens" not in sent:
        notes.append("dataset fingerprint from its settings only (save with --save-detailed for the prompt lengths)")
    model = data.get("model_id")
    fingerprint = _fingerprint(VLLM_BENCH, sent)
    return ImportedRun(VLLM_BENCH, path, fingerprint, None if model is None else str(model), (point,), tuple(notes))


def _dist(metrics: JsonObject, key: str, scale: float = 1.0) -> tuple[float | None, float | None, float | None]:
    ok = json_object(json_object(metrics.get(key)).get("successful"))
    pct = json_object(ok.get("percentiles"))

    def get(name: str) -> float | None:
        v = pct.get(name)
        return None if v is None else _float(v) * scale

    return get("p50"), get("p95"), get("p99")


def _guidellm_point(b: JsonObject, index: int) -> LoadPoint:
    strategy = json_object(json_object(b.get("config")).get("strategy"))
    kind = strategy.get("type_") or strategy.get("type") or "unknown"
    m = json_object(b.get("metrics"))
    totals = json_object(m.get("request_totals"))
    ttft = _dist(m, "time_to_first_token_ms")
    latency = _dist(m, "request_latency", 1000.0)  # GuideLLM's request_latency is in seconds
    out_rate = json_object(json_object(m.get("output_tokens_per_second")).get("successful")).get("mean")
    streams = strategy.get("streams") if kind == "concurrent" else (1 if kind == "synchronous" else None)
    sched = json_object(b.get("scheduler_metrics"))
    start, end, rate = sched.get("measure_start_time"), sched.get("measure_end_time"), strategy.get("rate")
    return LoadPoint(
        label=f"{kind}" + (f"@{streams}" if streams else f"@{rate}" if rate else "") + f" (#{index})",
        concurrency=_float(streams) if streams else None,
        request_rate=number_at(strategy, "rate"),
        requests=_int(totals.get("total") or 0),
        errors=_int(totals.get("errored") or 0),
        ttft_ms_p50=ttft[0],
        ttft_ms_p95=ttft[1],
        ttft_ms_p99=ttft[2],
        latency_ms_p50=latency[0],
        latency_ms_p95=latency[1],
        latency_ms_p99=latency[2],
        output_tokens_per_s=_float(out_rate) if out_rate is not None else None,
        duration_s=(_float(end) - _float(start)) if start is not None and end is not None else None,
    )


def from_guidellm(data: JsonObject, path: str) -> ImportedRun:
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise InputError(f"{path}: not a GuideLLM benchmarks.json (no benchmarks list)")
    points = tuple(_guidellm_point(_object(b), i) for i, b in enumerate(benchmarks))
    config = json_object(data.get("config"))
    sent: JsonObject = {k: config[k] for k in GUIDELLM_DATA_KEYS if k in config}
    model = config.get("model")
    model = model if isinstance(model, str) else None
    notes = () if sent else ("the report has no data settings: every GuideLLM import counts as one request set",)
    return ImportedRun(GUIDELLM, path, _fingerprint(GUIDELLM, sent), model, points, notes)


def read_import(path: str | os.PathLike[str]) -> ImportedRun:
    """A `vllm bench serve` result or a GuideLLM report, recognised by its content."""
    p = Path(path)
    try:
        data = json.loads(read_text_limited(p, IMPORT_LIMIT_BYTES, "result file"))
    except JSON_ERRORS as err:
        raise InputError(f"{p}: not a JSON result file ({str(err)[:200]})") from None
    try:  # a hand-edited or truncated result: fields of the wrong type are bad input, not a crash
        if isinstance(data, dict) and "benchmarks" in data:
            return from_guidellm(data, str(p))
        if isinstance(data, dict) and "mean_ttft_ms" in data:
            return from_vllm_bench(data, str(p))
    except (TypeError, ValueError, AttributeError, OverflowError) as err:
        raise InputError(
            f"{p}: a field has an unexpected type or value ({err})",
            hint="import the file as the benchmark tool saved it",
        ) from None
    raise InputError(
        f"{p}: neither a `vllm bench serve --save-result` JSON nor a GuideLLM benchmarks.json",
        hint="give an oomkit run folder, or one of those two result files",
    )
