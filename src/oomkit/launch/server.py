"""`launched(profile)`: start vLLM from a profile into a new run folder, follow it until ready,
hand it to the caller, and stop the whole process group on the way out, whatever happens."""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oomkit.errors import RunFailed
from oomkit.fsio import json_object
from oomkit.launch import preflight
from oomkit.launch.affinity import pin_engine_cores
from oomkit.launch.follow import LogFollower, PhaseReached
from oomkit.launch.memory import MemorySampler
from oomkit.launch.profile import Profile, load_profile
from oomkit.launch.runner import ServerProcess, StopReport
from oomkit.redact import redact_args
from oomkit.rundir import RunDir, now_iso
from oomkit.serial import Json, JsonObject, to_jsonable

if TYPE_CHECKING:
    from oomkit.triage.model import TriageResult

POLL_INTERVAL_S = 0.5
EOF_WAIT_S = 10.0  # after the server exits, how long to wait for the rest of its output
SNAPSHOT_WAIT_S = 30.0
HEALTH_TIMEOUT_S = 5.0
EXIT_BY_ITSELF_S = 2.0  # an API server whose engine died exits within about 0.5 s


@dataclass(frozen=True)
class Event:
    """Something the person watching should see: run_dir, model, started, phase, ready, failed,
    stopping, stopped."""

    kind: str
    t_s: float
    message: str
    data: JsonObject = field(default_factory=dict)


class StopRequested(Exception):
    """Raised in the main thread by oomkit's SIGTERM handler: stop the server as a normal end."""


@dataclass(frozen=True)
class LaunchResult:
    """How a launch went: the facts `oomkit launch --check --json` prints."""

    run_dir: Path
    state: str
    ready: bool
    reason: str | None
    """None when it went as asked; else exited_before_ready, start_timeout, died_after_ready,
    survivors, interrupted or error."""
    ready_s: float | None
    base_url: str
    phases: tuple[PhaseReached, ...]
    verdict: JsonObject
    """The triage verdict of the server log, as triage's JSON has it."""
    figures: JsonObject
    peak_memory_bytes: dict[str, int]
    memory_source: str
    stop: StopReport | None
    error: str | None = None

    def to_dict(self) -> JsonObject:
        return {
            "ready": self.ready,
            "state": self.state,
            "reason": self.reason,
            "error": self.error,
            "run_dir": str(self.run_dir),
            "base_url": self.base_url,
            "ready_s": None if self.ready_s is None else round(self.ready_s, 3),
            "phases": [p.phase for p in self.phases],
            "timeline": [p.to_dict() for p in self.phases],
            "verdict": self.verdict,
            "figures": self.figures,
            "peak_memory_bytes": dict(self.peak_memory_bytes),
            "memory_source": self.memory_source,
            "stop": self.stop.to_dict() if self.stop else None,
        }


class LaunchFailed(RunFailed):
    """The server did not become ready (or did not stop cleanly); `result` says why."""

    def __init__(self, message: str, result: LaunchResult, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.result = result
        self.verdict = result.verdict


class Server:
    """A running vLLM server that belongs to one run folder."""

    def __init__(self, profile: Profile, run: RunDir, port: int, on_event: Callable[[Event], None] | None = None):
        self.profile = profile
        self.run = run
        self.port = port
        self.base_url = f"http://{_url_host(profile.host)}:{port}"
        self.model_ids: list[str] = []
        self.ready_s: float | None = None
        self.result: LaunchResult | None = None
        self._on_event = on_event
        self._proc: ServerProcess | None = None
        self._follower: LogFollower | None = None
        self._sampler: MemorySampler | None = None
        self._cpu_at_start = 0.0
        self._overhead: JsonObject = {}

    run_dir = property(lambda self: self.run.path)
    log_path = property(lambda self: self.run.path / "server.log")
    pid = property(lambda self: self._proc.pid if self._proc else None)

    @property
    def headers(self) -> dict[str, str]:
        """What oomkit's own requests carry: with `api_key` set, vLLM refuses /v1/* without it."""
        key = self.profile.api_key()
        return {"authorization": f"Bearer {key}"} if key else {}

    def alive(self) -> bool:
        return bool(self._proc and self._proc.alive())

    def triage(self) -> TriageResult:
        """The triage of the server log so far."""
        assert self._follower is not None, "the server was not started"
        return self._follower.result()

    def emit(self, kind: str, message: str, **data: Json) -> None:
        if self._on_event:
            t_s = time.monotonic() - self._proc.started if self._proc else 0.0
            self._on_event(Event(kind, t_s, message, data))

    def start(self) -> None:
        argv = self.profile.argv(self.port)
        self.run.file("server.log", "vLLM server stdout+stderr, redacted").touch()
        _load_watchers()
        self._cpu_at_start = _cpu_s()
        self._proc = ServerProcess(argv, self.profile.server_env())
        self.run.update(
            started_at=now_iso(),
            command=redact_args(argv),
            server={"pid": self._proc.pid, "pgid": self._proc.pgid, "create_time": self._proc.tree.root.create_time()},
        )
        self.emit("started", f"pid {self._proc.pid}: {' '.join(redact_args(argv))}")
        follower = LogFollower(self._proc.stdout, self.log_path, self._proc.started, on_phase=self._phase_reached)
        self._follower = follower.start()
        writer = self.run.jsonl("memory.jsonl", "memory samples: RSS of the process tree, GPU used per device")
        self._sampler = MemorySampler(
            self._proc.tree, writer, lambda: follower.current_phase, started=self._proc.started
        ).start()

    def _phase_reached(self, reached: PhaseReached) -> None:
        if self._sampler is not None:
            self._sampler.phase_changed()
        self.emit("phase", reached.phase, phase=reached.phase, line=reached.line)

    def wait_ready(self) -> str | None:
        """Poll /health and /v1/models until both answer. None when ready, else the reason."""
        import httpx

        proc, follower = self._proc, self._follower
        assert proc is not None and follower is not None, "the server was not started"
        deadline = proc.started + self.profile.start_timeout_s
        with httpx.Client(trust_env=False, timeout=2.0, headers=self.headers) as client:
            while True:
                if not proc.alive():
                    follower.join(EOF_WAIT_S)
                    return "exited_before_ready"
                if time.monotonic() > deadline:
                    return "start_timeout"
                if self._probe(client):
                    self._mark_ready()
                    return None
                time.sleep(POLL_INTERVAL_S)

    def _probe(self, client: Any) -> bool:
        try:
            if client.get(self.base_url + "/health").status_code != 200:
                return False
            models = client.get(self.base_url + "/v1/models")
        except Exception:
            return False  # not listening yet
        if models.status_code != 200:
            return False
        try:
            self.model_ids = [m["id"] for m in models.json().get("data", [])]
        except Exception:
            return False
        return bool(self.model_ids)

    def _mark_ready(self) -> None:
        assert self._proc is not None
        self.ready_s = time.monotonic() - self._proc.started
        cpu_s = _cpu_s() - self._cpu_at_start
        self._overhead = {
            "oomkit_cpu_s_until_ready": round(cpu_s, 4),
            "ready_s": round(self.ready_s, 3),
            "ratio": round(cpu_s / self.ready_s, 5) if self.ready_s else None,
        }
        self.run.update(
            ready_at=now_iso(),
            ready_s=round(self.ready_s, 3),
            base_url=self.base_url,
            served_models=self.model_ids,
            overhead=self._overhead,
        )
        self._pin_engine_cores()
        peak = max(self._sampler.peaks.primary().values(), default=0) if self._sampler else 0
        self.emit("ready", self.base_url, ready_s=self.ready_s, peak_bytes=peak, models=to_jsonable(self.model_ids))

    def _pin_engine_cores(self) -> None:
        """The profile's `engine_core_cpus`, applied and recorded (launch.affinity says why)."""
        if self.profile.engine_core_cpus is None or self._proc is None:
            return
        pinning = pin_engine_cores(self._proc.tree.live(), tuple(self.profile.engine_core_cpus))
        self.run.update(engine_core_cpus=pinning.to_dict())
        if pinning.reason:
            self.emit("note", f"engine_core_cpus not applied: {pinning.reason}")

    def wait_exit(self, poll_s: float = 0.5) -> None:
        """Block until the server exits by itself (the foreground `oomkit launch`)."""
        while self.alive():
            time.sleep(poll_s)

    def close(self, state: str, reason: str | None, error: str | None = None) -> LaunchResult:
        """Stop everything, finalise the manifest, and return the result (idempotent)."""
        if self.result is not None:
            return self.result
        stop = None
        if self._proc:
            if state == "complete" and (dead := self._engine_dead(self._proc)):
                state, reason, error = "failed", "died_after_ready", dead
            if self._proc.alive():
                self.emit("stopping", "stopping the server's process group")
            stop = self._proc.stop(self.profile.stop_timeout_s)
            # Both start right after the process; a failure in between leaves them unset.
            if self._follower:
                self._follower.join(EOF_WAIT_S)
            if self._sampler:
                self._sampler.stop()
            if state == "complete" and not stop.requested:
                state, reason = "failed", "died_after_ready"
            if stop.survivors:
                state, reason = "failed", "survivors"
        snapshot = _snapshot_with_timeout()
        self.result = self._build_result(state, reason, error, stop)
        self.run.finish(
            state,
            reason=reason,
            error=error,
            exit_code=stop.exit_code if stop else None,
            stop=stop.to_dict() if stop else None,
            ready=self.result.ready,
            phases=[p.to_dict() for p in self.result.phases],
            verdict=self.result.verdict,
            figures=self.result.figures,
            env_snapshot=snapshot,
            memory=self._memory_summary(),
            vllm_version=self._vllm_version(),
        )
        self.emit("stopped", state, state=state, reason=reason)
        return self.result

    def _engine_dead(self, proc: ServerProcess) -> str | None:
        """Why the server is dead although its API server still runs, or None. After its engine
        dies, vLLM's API server answers /health with 503 and exits by itself about 0.5 s later
        (cpu-testbed.md §9); stopped first, such a run would pass for complete."""
        import httpx

        if self.ready_s is None or not self.alive():
            return None
        try:
            with httpx.Client(trust_env=False, timeout=HEALTH_TIMEOUT_S) as client:
                status = client.get(self.base_url + "/health").status_code
        except httpx.TimeoutException:
            return None  # busy is not dead
        except httpx.HTTPError:
            proc.wait(EXIT_BY_ITSELF_S)  # it stopped listening on its way out; the stop sees it gone
            return None
        return f"the engine died after ready (GET /health answered {status})" if status >= 500 else None

    def _build_result(self, state: str, reason: str | None, error: str | None, stop: StopReport | None) -> LaunchResult:
        triage = self._follower.result().to_dict() if self._follower else {}
        facts = json_object(triage.get("facts"))
        return LaunchResult(
            run_dir=self.run.path,
            state=state,
            ready=self.ready_s is not None,
            reason=reason,
            ready_s=self.ready_s,
            base_url=self.base_url,
            phases=tuple(self._follower.phases) if self._follower else (),
            verdict=json_object(triage.get("verdict")),
            figures=json_object(facts.get("figures")),
            peak_memory_bytes=self._sampler.peaks.primary() if self._sampler else {},
            memory_source=self._sampler.source if self._sampler else "none",
            stop=stop,
            error=error,
        )

    def _memory_summary(self) -> JsonObject:
        if not self._sampler:
            return {}
        peaks = self._sampler.peaks
        return {
            "source": self._sampler.source,
            "interval_s": POLL_INTERVAL_S,
            "samples": self._sampler.samples,
            "peak_rss_bytes": to_jsonable(peaks.rss_bytes),
            "peak_gpu_used_bytes": to_jsonable(peaks.gpu_used_bytes or None),
        }

    def _vllm_version(self) -> str | None:
        if not self._follower:
            return None
        return self._follower.result().facts.vllm_version


def _load_watchers() -> None:
    """Import what watching the server needs (the triage rules, compiled at import; the HTTP client) before it
    starts: a one-time set-up, neither counted as the watch's overhead nor run while the server competes for CPU."""
    import httpx  # noqa: F401

    import oomkit.triage  # noqa: F401


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # this process, all threads; not vLLM's
    return usage.ru_utime + usage.ru_stime


def _own_create_time() -> float | None:
    from oomkit.launch.memory import _psutil

    return _psutil().Process().create_time()


def _url_host(host: str) -> str:
    """Where oomkit reaches the server: a wildcard listen address (all interfaces) through loopback."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"[{host}]" if ":" in host else host


def _snapshot_with_timeout() -> JsonObject:
    box: JsonObject = {}
    thread = threading.Thread(target=lambda: box.update(preflight.env_snapshot()), daemon=True)
    thread.start()
    thread.join(SNAPSHOT_WAIT_S)
    return box or {"error": f"env snapshot did not finish within {SNAPSHOT_WAIT_S:.0f} s"}


def prepare(
    profile_or_path: Profile | str | Path,
    runs_dir: str | Path = "runs",
    label: str | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> Server:
    """Preflight checks, the testbed model if the profile names one, and a new run folder."""
    profile = profile_or_path if isinstance(profile_or_path, Profile) else load_profile(profile_or_path)
    preflight.check_vllm(profile)
    if profile.model.startswith("testbed:"):
        if on_event:
            on_event(Event("model", 0.0, f"testbed model {profile.model} (built on first use)"))
        profile.resolved_model(create=True)
    port = preflight.choose_port(profile)
    run = RunDir.create(runs_dir, label or profile.label, kind="launch")
    run.update(
        profile=profile.to_dict(),
        profile_file=profile.source,
        env=preflight.recorded_env(profile),
        versions=preflight.versions(profile),
        oomkit_create_time=_own_create_time(),
    )
    server = Server(profile, run, port, on_event)
    server.emit("run_dir", str(run.path))
    return server


@contextmanager
def launched(
    profile_or_path: Profile | str | Path,
    runs_dir: str | Path = "runs",
    label: str | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> Iterator[Server]:
    """Start vLLM and wait until it is ready (or raise LaunchFailed, a RunFailed with the verdict).
    On exit the whole process group is stopped, survivors checked, the manifest finalised."""
    server = prepare(profile_or_path, runs_dir, label, on_event)
    try:
        server.start()
        reason = server.wait_ready()
    except KeyboardInterrupt:
        server.close("interrupted", "interrupted")
        raise
    except StopRequested:
        server.close("interrupted", "stop requested before ready")
        raise
    except BaseException as err:
        server.close("failed", "error", error=f"{type(err).__name__}: {err}")
        raise
    if reason is not None:
        raise _failed(server, reason)
    try:
        yield server
    except StopRequested:
        server.close("complete", None)
    except KeyboardInterrupt:
        server.close("interrupted", "interrupted")
        raise
    except BaseException as err:
        server.close("failed", "error", error=f"{type(err).__name__}: {err}")
        raise
    else:
        server.close("complete", None)
    if server.result and server.result.state == "failed":
        raise _failed(server, server.result.reason or "failed", closed=True)


def _failed(server: Server, reason: str, closed: bool = False) -> LaunchFailed:
    if not closed:
        error = (
            f"not ready after {server.profile.start_timeout_s:g} s (start_timeout_s)"
            if reason == "start_timeout"
            else "the server exited before it was ready"
        )
        server.close("failed", reason, error=error)
    result = server.result
    assert result is not None
    summary = result.verdict.get("summary") or "no verdict"
    phase = result.verdict.get("phase", "unknown")
    what = {
        "exited_before_ready": "vLLM exited before it was ready",
        "start_timeout": f"vLLM was not ready within {server.profile.start_timeout_s:g} s",
        "died_after_ready": result.error or "vLLM exited by itself after it was ready",
        "survivors": f"processes survived the stop: {list(result.stop.survivors) if result.stop else []}",
    }
    return LaunchFailed(
        f"{what.get(reason, reason)}: {phase}: {summary}",
        result,
        hint=f"see {result.run_dir}/server.log and manifest.json",
    )
