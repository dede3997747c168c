"""Small inline SVG charts for the inspector page: lines over iterations, bars per category.

Plain SVG text (no script, no library): each point carries a ``<title>`` the browser
shows on hover.  Missing values (None) break a line instead of inventing a point.
"""

from __future__ import annotations

import html
import math
from typing import Sequence

#: Line colours, in order (colour-blind-safe Okabe-Ito).
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#f0e442", "#000000")
WIDTH, HEIGHT = 330, 190
LEFT, RIGHT, TOP, BOTTOM = 44, 10, 26, 40


def _fmt(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 1000:
        return f"{value:.3g}"
    return f"{value:.2e}"


def _ticks(low: float, high: float) -> list[float]:
    """About four round tick values spanning [low, high]."""
    if high <= low:
        return [low]
    step = 10 ** math.floor(math.log10((high - low) / 4))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= 5:
            step *= factor
            break
    first = math.ceil(low / step - 1e-9) * step
    return [first + k * step for k in range(int((high - first) / step + 1e-9) + 1)]


def line_chart(title: str, x: Sequence[int], series: dict[str, Sequence[float | None]], *,
               y_min: float | None = None, y_max: float | None = None, css_class: str = "plot") -> str:
    """One chart of ``series`` (name -> a value per ``x``) over ``x``, with axes, a legend and hover titles."""
    values = [v for ys in series.values() for v in ys if v is not None]
    low = min(values, default=0.0) if y_min is None else y_min
    high = max(values, default=1.0) if y_max is None else y_max
    if high <= low:
        high = low + 1.0
    x_low, x_high = (min(x), max(x)) if x else (0, 1)
    x_span = max(x_high - x_low, 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(v: float) -> float:
        return LEFT + (v - x_low) / x_span * plot_w if x_high > x_low else LEFT + plot_w / 2

    def py(v: float) -> float:
        return TOP + (1 - (v - low) / (high - low)) * plot_h

    out = [f'<svg class="{css_class}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
           f'aria-label="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<text x="{LEFT}" y="14" class="title">{html.escape(title)}</text>',
           f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    for tick in _ticks(low, high):
        y = py(tick)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{LEFT - 4}" y="{y + 3:.1f}" class="tick" text-anchor="end">{_fmt(tick)}</text>')
    for tick in _ticks(x_low, x_high) if x_high > x_low else [x_low]:
        if float(tick).is_integer():
            out.append(f'<text x="{px(tick):.1f}" y="{TOP + plot_h + 13}" class="tick" text-anchor="middle">'
                       f"{int(tick)}</text>")
    for k, (name, ys) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        runs: list[list[tuple[float, float]]] = [[]]
        for xi, yi in zip(x, ys):
            if yi is None:
                runs.append([])
            else:
                runs[-1].append((xi, yi))
        for run in runs:
            if len(run) > 1:
                points = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in run)
                out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
            for a, b in run:
                out.append(f'<circle cx="{px(a):.1f}" cy="{py(b):.1f}" r="2.2" fill="{colour}">'
                           f"<title>{html.escape(name)}, iteration {a}: {_fmt(b)}</title></circle>")
        if len(series) > 1:  # legend rows of three under the axis
            lx, ly = LEFT + (k % 3) * (plot_w / 3), TOP + plot_h + 26 + 10 * (k // 3)
            out.append(f'<rect x="{lx:.1f}" y="{ly - 4:.1f}" width="8" height="3" fill="{colour}"/>'
                       f'<text x="{lx + 11:.1f}" y="{ly:.1f}" class="legend">{html.escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def bar_chart(title: str, bars: dict[str, float], *, y_max: float = 1.0, css_class: str = "plot") -> str:
    """One bar per category (e.g. success per task type), with its value on hover."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [f'<svg class="{css_class}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
           f'aria-label="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<text x="{LEFT}" y="14" class="title">{html.escape(title)}</text>',
           f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    for tick in _ticks(0.0, y_max):
        y = TOP + (1 - tick / y_max) * plot_h
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{LEFT - 4}" y="{y + 3:.1f}" class="tick" text-anchor="end">{_fmt(tick)}</text>')
    slot = plot_w / max(len(bars), 1)
    for k, (name, value) in enumerate(bars.items()):
        h = max(min(value / y_max, 1.0), 0.0) * plot_h
        x = LEFT + k * slot + slot * 0.15
        out.append(f'<rect x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
                   f'fill="{PALETTE[k % len(PALETTE)]}"><title>{html.escape(name)}: {_fmt(value)}</title></rect>'
                   f'<text x="{x + slot * 0.35:.1f}" y="{TOP + plot_h + 13}" class="tick" text-anchor="middle">'
                   f"{html.escape(name[:10])}</text>")
    out.append("</svg>")
    return "".join(out)
