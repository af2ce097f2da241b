"""Read /metrics with prometheus_client's text parser into flat samples, once or every second."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from oomkit.errors import MissingDependency
from oomkit.metrics.names import BY_KEY, IGNORED_LABELS, INFO_FAMILY, KEEP_PREFIXES
from oomkit.metrics.periodic import start_loop, stop_loop
from oomkit.serial import JsonObject, to_jsonable

SKIP_SUFFIXES = ("_bucket", "_created")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Scrape:
    t_unix_s: float
    samples: dict[str, float]
    """`name{label="v",...}` (labels sorted, model_name dropped) -> value."""
    info: dict[str, str] = field(default_factory=dict)
    """Labels of vllm:cache_config_info (block_size, num_gpu_blocks, ...)."""
    error: str | None = None
    label: str = ""

    def to_dict(self) -> JsonObject:
        d: JsonObject = {"t_unix_s": round(self.t_unix_s, 3), "label": self.label, "samples": to_jsonable(self.samples)}
        if self.error:
            d["error"] = self.error
        return d


def _parser() -> Any:
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as err:
        raise MissingDependency(
            "reading /metrics needs prometheus_client", hint="pip install prometheus_client"
        ) from err
    return text_string_to_metric_families


def sample_key(name: str, labels: dict[str, str]) -> str:
    kept = sorted((k, v) for k, v in labels.items() if k not in IGNORED_LABELS)
    if not kept:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in kept) + "}"


def _kept_lines(text: str) -> str:
    # Histogram buckets and Python/HTTP families are most of vLLM's /metrics (462 of 609 lines
    # after a load); dropping their lines first makes the parse ~9x cheaper (22 -> 2.5 ms), and
    # it runs every second (in a thread) next to the streams whose timings we measure.
    keep = []
    for line in text.splitlines():
        name = line[7:] if line.startswith(("# TYPE ", "# HELP ")) else line
        metric = name.split(" ", 1)[0].split("{", 1)[0]
        if name.startswith(KEEP_PREFIXES) and not metric.endswith(SKIP_SUFFIXES):
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse(text: str, t_unix_s: float | None = None, label: str = "") -> Scrape:
    """Parse Prometheus text exposition; keeps the vllm:* samples (no buckets)."""
    samples: dict[str, float] = {}
    info: dict[str, str] = {}
    for family in _parser()(_kept_lines(text)):
        if not family.name.startswith(KEEP_PREFIXES):
            continue
        for s in family.samples:
            if s.name.endswith(SKIP_SUFFIXES):
                continue
            if family.name == INFO_FAMILY:
                info = {k: v for k, v in s.labels.items() if k not in IGNORED_LABELS}
                continue
            samples[sample_key(s.name, s.labels)] = float(s.value)
    return Scrape(time.time() if t_unix_s is None else t_unix_s, samples, info, label=label)


READ_NAMES = frozenset(name for metric in BY_KEY.values() for name in metric.names)
"""The metric names that per-window figures read (every alias); the rest stays on disk only."""


def compact(scrape: Scrape) -> Scrape:
    """What a window needs of a scrape, for the series kept in memory: a bench may scrape every
    second for hours (about 20 KB a scrape in full, under 2 KB compact; benchmarks/long_run.py)."""
    samples = {sys.intern(k): v for k, v in scrape.samples.items() if _base(k)[0] in READ_NAMES}
    return replace(scrape, samples=samples, info={}, label=sys.intern(scrape.label))


def _base(key: str) -> tuple[str, str]:
    name, _, rest = key.partition("{")
    return name, rest


def value(scrape: Scrape, key: str) -> float | None:
    """Sum over label sets of the first alias present; None when no alias is in the scrape."""
    metric = BY_KEY[key]
    for name in metric.names:
        total, found = 0.0, False
        for k, v in scrape.samples.items():
            if _base(k)[0] == name:
                total, found = total + v, True
        if found:
            return total
    return None


def by_label(scrape: Scrape, key: str) -> dict[str, float] | None:
    metric = BY_KEY[key]
    for name in metric.names:
        out: dict[str, float] = {}
        for k, v in scrape.samples.items():
            base, rest = _base(k)
            if base != name:
                continue
            labels = dict(_LABEL.findall(rest))
            if metric.label in labels:
                lv = labels[metric.label]
                out[lv] = out.get(lv, 0.0) + v
        if out:
            return out
    return None


def name_used(scrape: Scrape, key: str) -> str | None:
    for name in BY_KEY[key].names:
        if any(_base(k)[0] == name for k in scrape.samples):
            return name
    return None


class Scraper:
    """Scrapes `<base_url>/metrics` every `interval_s` into memory and into `sink` (one dict per
    scrape); a failed scrape is recorded with its error, never raised (the server may be dying)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        base_url: str,
        sink: Callable[[JsonObject], None] | None = None,
        interval_s: float = 1.0,
        label: Callable[[], str] = lambda: "",
    ):
        self.http = http
        self.url = base_url.rstrip("/") + "/metrics"
        self.sink = sink
        self.interval_s = interval_s
        self.label = label
        self.scrapes: list[Scrape] = []
        self.info: dict[str, str] = {}
        self.available: bool | None = None
        self._task: asyncio.Task[None] | None = None

    async def scrape_now(self) -> Scrape:
        label = self.label()
        try:
            resp = await self.http.get(self.url, timeout=5.0)
            if resp.status_code != 200:
                raise ValueError(f"HTTP {resp.status_code}")
            scrape = await asyncio.to_thread(parse, resp.text, None, label)
        except Exception as err:
            scrape = Scrape(time.time(), {}, error=f"{type(err).__name__}: {err}"[:200], label=label)
        if scrape.error is None:
            self.available = True
            self.info = self.info or scrape.info
        elif self.available is None:
            self.available = False
        self.scrapes.append(compact(scrape))  # in full in `sink` (metrics.jsonl)
        if self.sink:
            self.sink(scrape.to_dict())
        return scrape

    async def _loop(self) -> None:
        while True:
            began = time.monotonic()
            await self.scrape_now()
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - began)))

    def start(self) -> None:
        self._task = start_loop(self._loop)

    async def stop(self) -> None:
        await stop_loop(self._task)
        self._task = None

    def mark(self) -> int:
        return len(self.scrapes)

    def since(self, mark: int) -> list[Scrape]:
        return [s for s in self.scrapes[mark:] if s.error is None]
