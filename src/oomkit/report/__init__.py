"""`oomkit report`: a decision (or a run) as a self-contained HTML page with inline SVG charts,
as Markdown, or as JSON. `FORMATS` maps a format to its renderer; each takes the report data
and the time stamp to print, so the output depends only on its inputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from oomkit.decide.evidence import written_by_oomkit
from oomkit.errors import UsageError
from oomkit.fsio import write_text_atomic
from oomkit.redact import redact, redact_obj
from oomkit.report.html import render_html
from oomkit.report.markdown import render_markdown
from oomkit.report.model import ReportDoc, report_data


def render_json(d: ReportDoc, now: str) -> str:
    return json.dumps({**d, "generated_at": now}, indent=2, default=str) + "\n"


FORMATS: dict[str, Callable[[ReportDoc, str], str]] = {
    "html": render_html,
    "md": render_markdown,
    "json": render_json,
}
SUFFIX = {"html": "report.html", "md": "report.md", "json": "report.json"}


def render(ref: str, fmt: str = "html", out: str | None = None, runs_dir: str = "runs", now: str | None = None) -> Path:
    """Write the report of a decision or run folder; default: `<folder>/report.<fmt>`."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    data = report_data(ref, runs_dir)
    stamp = now or datetime.now(UTC).isoformat(timespec="seconds")
    with written_by_oomkit([ref]):  # a hand-edited field can reach a renderer as another type
        # Redacted before escaping too: `api_key=['x']` escaped for Markdown no longer looks like a secret.
        # redact_obj keeps the document's keys and shapes; it replaces secrets in strings.
        text = redact(FORMATS[fmt](cast(ReportDoc, redact_obj(data)), stamp))
    source = Path(data["source"])
    target = Path(out) if out else (source if source.is_dir() else source.parent) / SUFFIX[fmt]
    return write_text_atomic(target, text)


__all__ = ["FORMATS", "render", "render_html", "render_json", "render_markdown", "report_data"]
