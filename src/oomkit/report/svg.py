"""Inline SVG charts (no script, no external font): line charts of measured points and a bar chart.
Every label passes html.escape; numbers are formatted here, never taken as markup."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

W, H = 560, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 44
COLOURS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#57606a")
Series = tuple[str, Sequence[tuple[float, float]]]


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    step = (hi - lo) / n
    return [lo + i * step for i in range(n + 1)]


def _fmt(v: float) -> str:
    if abs(v) >= 1e9:
        return f"{v / 2**30:.2f}G"
    if abs(v) >= 1e6:
        return f"{v / 2**20:.0f}M"
    if abs(v) >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    return f"{v:.2f}"


def _frame(title: str, x_label: str, y_label: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<text x="{W / 2}" y="{H - 6}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="12" y="{H / 2}" text-anchor="middle" transform="rotate(-90 12 {H / 2})">{escape(y_label)}</text>',
    ]


def line_chart(title: str, x_label: str, y_label: str, series: list[Series], fmt: Callable[[float], str] = _fmt) -> str:
    pts = [p for _, s in series for p in s]
    out = _frame(title, x_label, y_label)
    if not pts:
        out.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" fill="#57606a">no data measured</text></svg>')
        return "\n".join(out)
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = max(p[1] for p in pts) * 1.1 or 1.0
    x1 = x1 if x1 > x0 else x0 + 1
    sx = lambda x: LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT)  # noqa: E731
    sy = lambda y: H - BOTTOM - y / y1 * (H - TOP - BOTTOM)  # noqa: E731
    out.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}" '
        'fill="#f6f8fa" stroke="#d0d7de"/>'
    )
    for t in _ticks(0, y1):
        out.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#d0d7de"/>'
            f'<text x="{LEFT - 4}" y="{sy(t) + 4:.1f}" text-anchor="end">{escape(fmt(t))}</text>'
        )
    for t in _ticks(x0, x1):
        out.append(f'<text x="{sx(t):.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">{escape(_fmt(t))}</text>')
    for i, (name, s) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        ordered = sorted(s)
        if len(ordered) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ordered)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>' for x, y in ordered]
        out.append(
            f'<rect x="{LEFT + 8 + i * 150}" y="{TOP + 6}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{LEFT + 22 + i * 150}" y="{TOP + 15}">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(title: str, y_label: str, bars: list[tuple[str, float]], y_max: float = 1.0) -> str:
    out = _frame(title, "mode", y_label)
    if not bars:
        out.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" fill="#57606a">no data measured</text></svg>')
        return "\n".join(out)
    span = W - LEFT - RIGHT
    width = span / len(bars)
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" stroke="#57606a"/>')
    for i, (name, value) in enumerate(bars):
        h = max(0.0, min(value, y_max)) / y_max * (H - TOP - BOTTOM)
        x = LEFT + i * width + width * 0.15
        out.append(
            f'<rect x="{x:.1f}" y="{H - BOTTOM - h:.1f}" width="{width * 0.7:.1f}" height="{h:.1f}" '
            f'fill="{COLOURS[i % len(COLOURS)]}"/>'
            f'<text x="{x + width * 0.35:.1f}" y="{H - BOTTOM - h - 4:.1f}" text-anchor="middle">'
            f"{escape(f'{value:.1%}')}</text>"
            f'<text x="{x + width * 0.35:.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)
