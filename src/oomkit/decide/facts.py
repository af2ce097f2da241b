"""What the evidence says, computed once for the rules, the checklist and the team criteria:
launches and their verdicts, the ladder, the comparisons, and the measured concurrency capacity."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from oomkit.compare.document import CellDoc, CompareDoc, MetricKey, ModeDoc
from oomkit.decide.documents import EnvSnapshotDoc, LadderDoc, LaunchVerdict, StepDoc, number
from oomkit.decide.evidence import RunEvidence
from oomkit.decide.model import CapacityDoc, PointDoc
from oomkit.decide.requirements import Requirements
from oomkit.fsio import json_object, json_objects
from oomkit.imports import ImportedRun
from oomkit.ladder.poc import Poc
from oomkit.serial import JsonObject, to_json_object

if TYPE_CHECKING:
    from oomkit.env.check import CheckReport

LOAD_PHASES = ("weight_loading", "memory_profiling")
ENV_PHASES = ("environment", "network_communication")


@dataclass(frozen=True)
class Measured:
    """What one load level measured, as capacity is judged on it."""

    concurrency: float
    errors: float
    preemptions: float | None
    ttft_ms_p95: float | None
    latency_ms_p95: float | None

    @classmethod
    def of(cls, concurrency: float, figures: Mapping[str, object]) -> Measured:
        """From a ladder rung's detail or a compare cell (the same keys)."""
        return cls(
            concurrency,
            number(figures.get("errors")) or 0,
            number(figures.get("preemptions")),
            number(figures.get("ttft_ms_p95")),
            number(figures.get("latency_ms_p95")),
        )


@dataclass(frozen=True)
class Point:
    """One measured concurrency level: did it hold (no errors, no preemptions, SLOs met)?"""

    concurrency: float
    ok: bool
    why: str
    source: str
    figures: JsonObject = field(default_factory=dict)
    """What the level measured, as its source recorded it (a ladder rung, a cell, an import)."""

    def to_dict(self) -> PointDoc:
        return {
            "concurrency": self.concurrency,
            "ok": self.ok,
            "why": self.why,
            "source": self.source,
            "figures": self.figures,
        }


@dataclass(frozen=True)
class Capacity:
    last_good: float | None
    """The highest concurrency that held, below the first one that did not."""
    first_bad: float | None
    max_tested: float | None
    points: tuple[Point, ...]

    def to_dict(self) -> CapacityDoc:
        return {
            "last_good": self.last_good,
            "first_bad": self.first_bad,
            "max_tested": self.max_tested,
            "points": [p.to_dict() for p in self.points],
        }


class Facts:
    def __init__(
        self,
        runs: list[RunEvidence],
        req: Requirements | None,
        request_set_id: str | None,
        recipe_check: CheckReport | None = None,
    ):
        self.runs, self.req, self.request_set_id, self.recipe_check = runs, req, request_set_id, recipe_check
        self.launches = [r for r in self._all() if r.launched]
        self.ladders = [r for r in runs if r.ladder]
        self.compares = [r for r in runs if r.compare]
        self.benches = [r for r in runs if r.bench]
        self.imports = [r for r in runs if r.imported]
        # The same folders with their file, for the type checker: (run, ladder.json), (run, compare.json), ...
        self.with_ladder = [(r, r.ladder) for r in runs if r.ladder]
        self.with_compare = [(r, r.compare) for r in runs if r.compare]
        self.with_import: list[tuple[RunEvidence, ImportedRun]] = [(r, r.imported) for r in runs if r.imported]

    def _all(self) -> list[RunEvidence]:
        """Every folder once: a compare's server may be a ladder run given on its own too."""
        seen: dict[str, RunEvidence] = {}
        for r in self.runs:
            for x in (r, *r.servers):
                seen.setdefault(x.path, x)
        return list(seen.values())

    # -- launches ----------------------------------------------------------------------------
    def verdicts(self) -> list[tuple[RunEvidence, LaunchVerdict]]:
        return [(r, r.manifest.get("verdict") or {}) for r in self.launches]

    def failed_launches(self, phases: tuple[str, ...]) -> list[tuple[RunEvidence, LaunchVerdict]]:
        return [(r, v) for r, v in self.verdicts() if v.get("phase") in phases and not r.manifest.get("ready")]

    def ready_launches(self) -> list[RunEvidence]:
        return [r for r in self.launches if r.manifest.get("ready")]

    def env_snapshot(self) -> EnvSnapshotDoc | None:
        for r in self.launches:
            snap = r.manifest.get("env_snapshot")
            if isinstance(snap, dict) and "error" not in snap:
                return snap
        return None

    def figures(self) -> JsonObject:
        for r in self.launches:
            if r.manifest.get("figures"):
                return dict(r.manifest["figures"])
        return {}

    def profile_args(self) -> JsonObject:
        for r in self.launches:
            if (r.manifest.get("profile") or {}).get("args") is not None:
                return dict(r.manifest["profile"]["args"])
        return {}

    # -- ladder ------------------------------------------------------------------------------
    def ladder(self) -> tuple[RunEvidence, LadderDoc] | tuple[None, None]:
        return self.with_ladder[0] if self.with_ladder else (None, None)

    def step(self, name: str) -> StepDoc | None:
        _, lad = self.ladder()
        return next((s for s in (lad or {}).get("steps", []) if s["name"] == name), None)

    def poc(self) -> Poc | None:
        _, lad = self.ladder()
        return (lad or {}).get("poc")

    # -- compare -----------------------------------------------------------------------------
    def compare(self) -> tuple[RunEvidence, CompareDoc] | tuple[None, None]:
        return self.with_compare[0] if self.with_compare else (None, None)

    def mode_cells(self, mode: str) -> list[CellDoc]:
        _, comp = self.compare()
        return [c for c in (comp.get("cells", []) if comp else []) if c["mode"] == mode]

    def modes(self) -> list[ModeDoc]:
        _, comp = self.compare()
        return comp.get("modes", []) if comp else []

    def mode(self, name: str) -> ModeDoc | None:
        return next((m for m in self.modes() if m["name"] == name), None)

    # -- capacity ----------------------------------------------------------------------------
    def slo_breach(self, ttft_p95: float | None, latency_p95: float | None) -> str | None:
        if self.req is None:  # a report of runs without requirements: errors and preemptions only
            return None
        slo = self.req.slo
        if ttft_p95 is not None and ttft_p95 > slo.ttft_p95_ms:
            return f"TTFT p95 {ttft_p95:.0f} ms > SLO {slo.ttft_p95_ms:g} ms"
        if latency_p95 is not None and latency_p95 > slo.e2e_p95_ms:
            return f"e2e p95 {latency_p95:.0f} ms > SLO {slo.e2e_p95_ms:g} ms"
        return None

    def _judge(self, m: Measured, source: str, figures: JsonObject) -> Point:
        c = m.concurrency
        if m.errors:
            return Point(c, False, f"{m.errors:g} errors", source, figures)
        if m.preemptions:
            return Point(c, False, f"{m.preemptions:g} preemptions (the KV cache ran out)", source, figures)
        breach = self.slo_breach(m.ttft_ms_p95, m.latency_ms_p95)
        return Point(c, breach is None, breach or "no errors, no preemptions, SLOs met", source, figures)

    def points(self) -> list[Point]:
        return self._ladder_points() + self._compare_points() + self._import_points()

    def _ladder_points(self) -> list[Point]:
        run, lad = self.ladder()
        if run is None or lad is None:
            return []
        out: list[Point] = []
        for s in lad.get("steps", []):
            if s["name"] != "concurrency":
                continue
            for rung in json_objects(s["detail"].get("rungs")):
                d = json_object(rung["detail"])
                source = f"{run.file('ladder.json')}: concurrency rung c={rung['concurrency']}"
                out.append(self._judge(Measured.of(_concurrency(rung), d), source, d))
        return out

    def _compare_points(self) -> list[Point]:
        crun, comp = self.compare()
        if crun is None or comp is None:
            return []
        # The baseline server's cells that differ only in concurrency measure capacity.
        modes = [m["name"] for m in self.modes() if m.get("factor") in (None, "concurrency")]
        return [
            self._judge(
                Measured.of(cell["concurrency"], cell),
                f"{crun.file('compare.json')}: cell {cell['label']}",
                _cell_figures(cell),
            )
            for mode in modes
            for cell in self.mode_cells(mode)
        ]

    def _import_points(self) -> list[Point]:
        return [
            self._judge(
                Measured(
                    p.concurrency, p.errors, None, p.ttft_ms_p95 or p.ttft_ms_p99, p.latency_ms_p95 or p.latency_ms_p99
                ),
                f"{r.path}: {p.label}",
                to_json_object(p),
            )
            for r, imported in self.with_import
            for p in imported.points
            if p.concurrency is not None
        ]

    def capacity(self) -> Capacity:
        pts = self.points()
        if not pts:
            return Capacity(None, None, None, ())
        bad = [p.concurrency for p in pts if not p.ok]
        first_bad = min(bad) if bad else None
        good = [p.concurrency for p in pts if p.ok and (first_bad is None or p.concurrency < first_bad)]
        return Capacity(max(good) if good else None, first_bad, max(p.concurrency for p in pts), tuple(pts))


class DecisionFacts(Facts):
    """Facts with the requirements they are judged against: what the rules, the checklist and the
    team criteria read (a report of runs without requirements has plain Facts)."""

    req: Requirements

    def __init__(
        self,
        runs: list[RunEvidence],
        req: Requirements,
        request_set_id: str | None,
        recipe_check: CheckReport | None = None,
    ):
        super().__init__(runs, req, request_set_id, recipe_check)


CellFigure = Literal["concurrency", "requests", MetricKey]
CELL_FIGURES: tuple[CellFigure, ...] = (
    "concurrency",
    "requests",
    "errors",
    "preemptions",
    "ttft_ms_p95",
    "latency_ms_p95",
    "session_ms_p95",
    "peak_memory_bytes",
    "max_kv_usage",
    "prefix_cache_hit_rate",
    "agent_success_share",
)
"""A cell's figures a capacity point keeps."""


def _cell_figures(cell: CellDoc) -> JsonObject:
    return {key: cell.get(key) for key in CELL_FIGURES}


def _concurrency(rung: JsonObject) -> float:
    """A ladder rung's concurrency: the level it loaded, so never missing."""
    c = number(rung["concurrency"])
    if c is None:
        raise TypeError("a concurrency rung without its concurrency")
    return c
