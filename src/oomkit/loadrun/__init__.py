"""The load-run layer below `bench`, `ladder`, `compare` and `forecast`: the server a load goes to,
its request set, the engine that sends it (streaming client, /metrics, memory, run-folder JSONL),
why a load failed, the client figures, resume of a run folder, the knee search and the text table.
It imports no stage package; the stages import it and not each other."""

from oomkit.loadrun.context import LoadContext
from oomkit.loadrun.engine import Load, SessionBatch, SessionOutcome, Window, run_async
from oomkit.loadrun.failure import Failure, classify
from oomkit.loadrun.folder import FolderSpec, resume_or_create
from oomkit.loadrun.history import scaled
from oomkit.loadrun.knee import Knee, Rung, find_knee
from oomkit.loadrun.prepare import TargetSpec, open_target, request_set_for
from oomkit.loadrun.progress import NoProgress, Progress
from oomkit.loadrun.result import AgentStats, ResultHeader
from oomkit.loadrun.stats import ClientStats, parse_slos, percentile, summarise
from oomkit.loadrun.table import table
from oomkit.loadrun.target import Target, profile_target, url_target

__all__ = [
    "AgentStats",
    "ClientStats",
    "Failure",
    "FolderSpec",
    "Knee",
    "Load",
    "LoadContext",
    "NoProgress",
    "Progress",
    "ResultHeader",
    "Rung",
    "SessionBatch",
    "SessionOutcome",
    "Target",
    "TargetSpec",
    "Window",
    "classify",
    "find_knee",
    "open_target",
    "parse_slos",
    "percentile",
    "profile_target",
    "request_set_for",
    "resume_or_create",
    "run_async",
    "scaled",
    "summarise",
    "table",
    "url_target",
]
