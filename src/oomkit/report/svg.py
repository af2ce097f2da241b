"""Inline SVG charts (no script, no external font): line charts of measured points with the knee and
the planned or required values drawn as marks, and a bar chart. Measured values are solid lines and
dots (hollow where the level fails), forecast ones finely dashed lines with small dots, required
values dashed, planned ones dotted; a legend under the plot says which is which. Every label passes html.escape; numbers are formatted here, never markup."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from oomkit.units import fmt_number, fmt_pct

W, PLOT_H = 560, 230
LEFT, RIGHT, TOP = 64, 16, 28
BOTTOM = TOP + PLOT_H - 44  # y of the x axis
LEGEND_ROW, CHAR_W = 16, 6.2
COLOURS = ("#1f6feb", "#1a7f37", "#d1242f", "#9a6700", "#8250df", "#57606a")
KNEE_FILL = "#d1242f"
FORECAST_DASH = "3 3"
# How a mark is drawn: stroke colour and dash pattern ("" for solid).
MARK_STYLE = {
    "required": ("#9a6700", "7 4"),
    "reserve": ("#8250df", "7 4"),
    "slo_ttft": ("#0969da", "7 4"),
    "slo_e2e": ("#bf3989", "7 4"),
    "planned": ("#57606a", "2 3"),
}
Point = tuple[float, float]


@dataclass(frozen=True)
class Series:
    """Measured points, joined in x order."""

    name: str
    points: Sequence[Point]
    failed: frozenset[float] = frozenset()
    """x values of levels that fail: drawn as hollow dots."""
    forecast: bool = False
    """Forecast, not measured (oomkit forecast): a dashed line with small dots, never a solid one."""


@dataclass(frozen=True)
class Mark:
    """A line across the plot at `at` (vertical on the x axis, horizontal on y); kind "knee" is a band to `to`."""

    name: str
    at: float
    kind: str = "required"
    """A MARK_STYLE key (required, reserve and the SLOs dashed, planned dotted), or knee: a band."""
    axis: str = "x"
    to: float | None = None


@dataclass(frozen=True)
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    marks: list[Mark] = field(default_factory=list)
    x_integer: bool = False
    """Whole-number ticks only (concurrency): never a tick at 2.5 dialogs."""
    y_integer: bool = False
    x_from_zero: bool = False
    y_max: float | None = None
    """The top of the y axis unless the data go higher (100 for a percent)."""
    y_fmt: Callable[[float], str] = fmt_number


def nice_ticks(lo: float, hi: float, integer: bool = False, n: int = 5) -> list[float]:
    """Ticks at 1, 2, 2.5 or 5 times a power of ten that cover lo..hi; whole numbers only if `integer`."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    power = 10 ** math.floor(math.log10(raw))
    steps = (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10)
    step = next(s * power for s in steps if s * power >= raw)
    if integer:
        step = max(1.0, round(step))
    start = math.floor(lo / step) * step
    count = math.ceil(round((hi - start) / step, 9))
    return [round(start + i * step, 9) for i in range(count + 1)]


def _frame(title: str, x_label: str, y_label: str, height: int) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" width="{W}" height="{height}" '
        f'role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<text x="{W / 2}" y="{BOTTOM + 32}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="12" y="{(TOP + BOTTOM) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 12 {(TOP + BOTTOM) / 2})">{escape(y_label)}</text>',
    ]


def _empty(out: list[str]) -> str:
    out.append(
        f'<text x="{W / 2}" y="{(TOP + BOTTOM) / 2}" text-anchor="middle" fill="#57606a">no data measured</text>'
    )
    return "\n".join(out) + "\n</svg>"


def _swatch(kind: str, colour: str, x: float, y: float) -> str:
    """A legend symbol: a measured line with its dot, a hollow dot, a dashed or dotted line, a band."""
    if kind == "forecast":
        return (
            f'<line x1="{x}" x2="{x + 18}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="2" '
            f'stroke-dasharray="{FORECAST_DASH}"/><circle cx="{x + 9}" cy="{y}" r="2" fill="{colour}"/>'
        )
    if kind == "series":
        return (
            f'<line x1="{x}" x2="{x + 18}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="2"/>'
            f'<circle cx="{x + 9}" cy="{y}" r="3" fill="{colour}"/>'
        )
    if kind == "failed":
        return f'<circle cx="{x + 9}" cy="{y}" r="3.5" fill="#ffffff" stroke="{colour}" stroke-width="1.5"/>'
    if kind == "knee":
        return f'<rect x="{x}" y="{y - 5}" width="18" height="10" fill="{KNEE_FILL}" fill-opacity="0.15"/>'
    stroke, dash = MARK_STYLE[kind]
    return (
        f'<line x1="{x}" x2="{x + 18}" y1="{y}" y2="{y}" stroke="{stroke}" stroke-width="2" stroke-dasharray="{dash}"/>'
    )


def _legend_layout(entries: list[tuple[str, str, str]]) -> list[tuple[str, str, str, float, int]]:
    """Each entry (kind, colour, text) with its x and row: entries wrap at the chart's width."""
    placed, x, row = [], float(LEFT), 0
    for kind, colour, text in entries:
        width = 24 + len(text) * CHAR_W + 14
        if x + width > W - RIGHT and x > LEFT:
            x, row = float(LEFT), row + 1
        placed.append((kind, colour, text, x, row))
        x += width
    return placed


def _legend(entries: list[tuple[str, str, str]]) -> tuple[list[str], int]:
    placed = _legend_layout(entries)
    rows = 1 + max((r for *_, r in placed), default=-1)
    y0 = BOTTOM + 50
    out = [
        _swatch(kind, colour, x, y0 + row * LEGEND_ROW)
        + f'<text x="{x + 24:.1f}" y="{y0 + row * LEGEND_ROW + 4}">{escape(text)}</text>'
        for kind, colour, text, x, row in placed
    ]
    return out, rows


def _ranges(chart: Chart, marks: list[Mark]) -> tuple[list[float], list[float]]:
    pts = [p for s in chart.series for p in s.points]
    xs = [p[0] for p in pts] + [m.at for m in marks if m.axis == "x"] + [m.to for m in marks if m.to is not None]
    ys = [p[1] for p in pts] + [m.at for m in marks if m.axis == "y"]
    x_ticks = nice_ticks(0 if chart.x_from_zero else min(xs), max(xs), chart.x_integer, n=6)
    top = max(ys) * 1.1 if max(ys) > 0 else 1.0
    if chart.y_max is not None and max(ys) <= chart.y_max:
        top = chart.y_max
    y_ticks = nice_ticks(0, top, chart.y_integer)
    return x_ticks, y_ticks


def _on_chart(chart: Chart) -> tuple[list[Mark], list[Mark]]:
    """Horizontal marks far above the data (an SLO of 10 s when answers take 1 s) would flatten it:
    those are named in the legend only."""
    top = max((p[1] for s in chart.series for p in s.points), default=0.0)
    far = [m for m in chart.marks if m.axis == "y" and top and m.at > 3 * top]
    return [m for m in chart.marks if m not in far], far


def line_chart(chart: Chart) -> str:
    if not any(s.points for s in chart.series):
        return _empty(_frame(chart.title, chart.x_label, chart.y_label, BOTTOM + 50))
    marks, far = _on_chart(chart)
    entries = [
        ("forecast" if s.forecast else "series", COLOURS[i % len(COLOURS)], s.name) for i, s in enumerate(chart.series)
    ]
    if any(s.failed for s in chart.series):
        entries.append(("failed", "#57606a", "level fails (hollow)"))
    entries += [(m.kind, "", m.name) for m in marks]
    entries += [(m.kind, "", f"{m.name}: {chart.y_fmt(m.at)}, above the chart") for m in far]
    legend, rows = _legend(entries)
    out = _frame(chart.title, chart.x_label, chart.y_label, BOTTOM + 50 + rows * LEGEND_ROW)
    x_ticks, y_ticks = _ranges(chart, marks)
    x0, x1, y1 = x_ticks[0], x_ticks[-1], y_ticks[-1]
    sx = lambda x: LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT)  # noqa: E731
    sy = lambda y: BOTTOM - y / y1 * (BOTTOM - TOP)  # noqa: E731
    out.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{BOTTOM - TOP}" fill="#f6f8fa" stroke="#d0d7de"/>'
    )
    for t in y_ticks:
        out.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#d0d7de"/>'
            f'<text x="{LEFT - 4}" y="{sy(t) + 4:.1f}" text-anchor="end">{escape(chart.y_fmt(t))}</text>'
        )
    for t in x_ticks:
        out.append(f'<text x="{sx(t):.1f}" y="{BOTTOM + 14}" text-anchor="middle">{escape(fmt_number(t))}</text>')
    out += [_mark(m, sx, sy) for m in marks]
    for i, s in enumerate(chart.series):
        out += _series(s, COLOURS[i % len(COLOURS)], sx, sy)
    return "\n".join(out + legend) + "\n</svg>"


def _mark(m: Mark, sx: Callable[[float], float], sy: Callable[[float], float]) -> str:
    if m.kind == "knee":
        left, right = sx(m.at), sx(m.to if m.to is not None else m.at)
        return (
            f'<rect x="{left:.1f}" y="{TOP}" width="{max(right - left, 2):.1f}" height="{BOTTOM - TOP}" '
            f'fill="{KNEE_FILL}" fill-opacity="0.15"/>'
        )
    stroke, dash = MARK_STYLE[m.kind]
    if m.axis == "y":
        y = f"{sy(m.at):.1f}"
        return f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y}" y2="{y}" stroke="{stroke}" stroke-width="2" stroke-dasharray="{dash}"/>'
    x = f"{sx(m.at):.1f}"
    return f'<line x1="{x}" x2="{x}" y1="{TOP}" y2="{BOTTOM}" stroke="{stroke}" stroke-width="2" stroke-dasharray="{dash}"/>'


def _series(s: Series, colour: str, sx: Callable[[float], float], sy: Callable[[float], float]) -> list[str]:
    ordered = sorted(s.points)
    out = []
    if len(ordered) > 1:
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ordered)
        dash = f' stroke-dasharray="{FORECAST_DASH}"' if s.forecast else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
    if s.forecast:
        return out + [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2" fill="{colour}"/>' for x, y in ordered]
    for x, y in ordered:
        fill = "#ffffff" if x in s.failed else colour
        out.append(
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{fill}" stroke="{colour}" stroke-width="1.5"/>'
        )
    return out


def bar_chart(title: str, y_label: str, bars: list[tuple[str, float]], y_max: float = 1.0) -> str:
    """Shares (0 to y_max) as bars, each labelled with its percent."""
    out = _frame(title, "mode", y_label, BOTTOM + 50)
    if not bars:
        return _empty(out)
    width = (W - LEFT - RIGHT) / len(bars)
    sy = lambda v: BOTTOM - max(0.0, min(v, y_max)) / y_max * (BOTTOM - TOP)  # noqa: E731
    for t in nice_ticks(0, y_max):
        out.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#d0d7de"/>'
            f'<text x="{LEFT - 4}" y="{sy(t) + 4:.1f}" text-anchor="end">{escape(fmt_pct(t, decimals=0))}</text>'
        )
    for i, (name, value) in enumerate(bars):
        x = LEFT + i * width + width * 0.15
        out.append(
            f'<rect x="{x:.1f}" y="{sy(value):.1f}" width="{width * 0.7:.1f}" height="{BOTTOM - sy(value):.1f}" '
            f'fill="{COLOURS[i % len(COLOURS)]}"/>'
            f'<text x="{x + width * 0.35:.1f}" y="{sy(value) - 4:.1f}" text-anchor="middle">{escape(fmt_pct(value))}</text>'
            f'<text x="{x + width * 0.35:.1f}" y="{BOTTOM + 14}" text-anchor="middle">{escape(name)}</text>'
        )
    return "\n".join(out) + "\n</svg>"
