"""The bundle every load run carries: which server, which run folder, which request set, how the
client behaves, how memory is read, who hears about progress, the notes so far and which attempt
this is. `ladder`, `bench` and `compare` build one and hand it down instead of eight loose values."""

from __future__ import annotations

from dataclasses import dataclass, field

from oomkit.client.chat import ClientOptions
from oomkit.loadrun.progress import NoProgress, Progress
from oomkit.loadrun.target import Target
from oomkit.rundir import RunDir
from oomkit.workload.requestset import RequestSet


@dataclass(frozen=True)
class LoadContext:
    target: Target
    run_dir: RunDir
    """Where the load records: requests.jsonl, metrics.jsonl, load_memory.jsonl and the result."""
    request_set: RequestSet
    client: ClientOptions = field(default_factory=ClientOptions)
    memory: str = "auto"
    """auto, nvml, rss, none, or the URL of a DCGM exporter's /metrics (oomkit.metrics.memory)."""
    progress: Progress = field(default_factory=NoProgress)
    notes: tuple[str, ...] = ()
    """What preparing the load found worth saying (approximate token sizes, a trimmed set, a resume)."""
    attempt: int = 0
    """Written into every JSONL line: 0 for a first run, n for its n-th --resume."""
