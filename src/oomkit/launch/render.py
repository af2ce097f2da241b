"""Text for people: one line per launch event as it happens, and the summary at the end."""

from __future__ import annotations

from oomkit.fsio import json_list, json_objects
from oomkit.launch.server import Event, LaunchResult
from oomkit.redact import redact
from oomkit.serial import Json


def format_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit in ("B", "KiB") else f"{size:.2f} {unit}"
        size /= 1024
    return f"{n} B"


def render_event(event: Event) -> str | None:
    """One progress line, or None for events that need none."""
    if event.kind == "run_dir":
        return f"run folder  {event.message}"
    if event.kind == "model":
        return event.message
    if event.kind == "phase":
        return f"{event.t_s:7.1f}s  {event.message:<20} server.log:{event.data.get('line')}"
    if event.kind == "ready":
        peak_bytes = event.data.get("peak_bytes")
        peak = format_bytes(peak_bytes if isinstance(peak_bytes, int) else None)
        return f"{event.t_s:7.1f}s  {'READY':<20} {event.message}  (peak so far {peak})"
    if event.kind in ("started", "stopping", "serving", "note"):
        return f"{event.t_s:7.1f}s  {event.kind:<20} {redact(event.message)}"
    if event.kind == "stopped":
        return f"{event.t_s:7.1f}s  {'stopped':<20} run {event.message}"
    return None


def render_result(result: LaunchResult, request: Json = None) -> str:
    """The end-of-run summary: outcome, verdict with its evidence, peak memory per phase."""
    lines = [_headline(result, request)]
    verdict = result.verdict or {}
    if verdict and (not result.ready or verdict.get("phase") not in ("healthy", None)):
        lines.append(f"verdict: {verdict.get('phase')} ({verdict.get('confidence')}): {verdict.get('summary')}")
        lines += [
            f"  {e.get('file')}:{e.get('line')}: {e.get('text')}" for e in json_objects(verdict.get("evidence"))[:3]
        ]
        lines += [f"  next: {a}" for a in json_list(verdict.get("advice"))[:2]]
    figures = {k: v for k, v in (result.figures or {}).items() if v is not None}
    if "estimated_max_model_len" in figures:
        lines.append(f"vLLM's estimated maximum model length: {figures['estimated_max_model_len']}")
    if result.peak_memory_bytes:
        label = "GPU used" if result.memory_source == "nvml" else "RSS, process tree"
        lines.append(f"peak memory per phase ({label}):")
        lines += [f"  {phase:<20} {format_bytes(n)}" for phase, n in result.peak_memory_bytes.items()]
    if result.stop:
        survivors = list(result.stop.survivors)
        lines.append(
            f"stopped in {result.stop.stop_s:.1f} s, exit code {result.stop.exit_code}, "
            f"survivors: {survivors if survivors else 'none'}"
        )
    lines.append(f"run folder: {result.run_dir}")
    return "\n".join(redact(line) for line in lines)


def _headline(result: LaunchResult, request: Json) -> str:
    if not result.ready:
        return f"NOT READY ({result.reason}): {result.error or ''}".rstrip(": ")
    ready = f"ready in {result.ready_s:.1f} s at {result.base_url}"
    if isinstance(request, dict):  # the check request's JSON form; None without --check
        status = "ok" if request.get("ok") else f"FAILED ({request.get('error')})"
        ready += f"; check request {status}, {request.get('latency_ms')} ms"
    if result.state != "complete":
        return f"{result.state.upper()} ({result.reason}): {ready}"
    return ("HEALTHY: " if isinstance(request, dict) else "STOPPED: ") + ready
