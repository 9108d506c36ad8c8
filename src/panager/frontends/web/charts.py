"""A server-rendered SVG bar chart (tokens per day, stacked per model); no JavaScript.

Colours and sizes are SVG attributes, not style, so the page's strict CSP
(no inline styles) allows them. Every text is escaped here, which is why the
result may be marked safe for the template.
"""

from __future__ import annotations

from html import escape

from markupsafe import Markup

from panager.services.usage import DayUsage

PALETTE = ("#3b6fd8", "#e0873a", "#3aa676", "#b84fb8", "#c9a227", "#6b7a8f")
WIDTH, HEIGHT, LEFT, RIGHT, BOTTOM, TOP = 760, 240, 56, 24, 28, 12


def model_colours(days: list[DayUsage]) -> dict[str, str]:
    """A stable colour per model (most used first)."""
    totals: dict[str, int] = {}
    for day in days:
        for model, tokens in day.by_model.items():
            totals[model] = totals.get(model, 0) + tokens
    ranked = sorted(totals, key=lambda m: (-totals[m], m))
    return {model: PALETTE[i % len(PALETTE)] for i, model in enumerate(ranked)}


def bar_chart(days: list[DayUsage], budget: int | None = None) -> Markup:
    """Stacked bars of tokens per day; a dashed line at the daily budget when set."""
    colours = model_colours(days)
    peak = max([d.total for d in days] + [budget or 0, 1])
    plot_h = HEIGHT - BOTTOM - TOP
    step = (WIDTH - LEFT - RIGHT) / max(len(days), 1)
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="Tokens per day">']
    for fraction in (0, 0.5, 1):
        y = TOP + plot_h * (1 - fraction)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                     'stroke="#e3e6ea"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" '
                     f'font-size="11" fill="#667">{int(peak * fraction):,}</text>')
    for i, day in enumerate(days):
        x, base = LEFT + i * step + step * 0.15, float(TOP + plot_h)
        for model, tokens in sorted(day.by_model.items(), key=lambda kv: kv[0]):
            h = plot_h * tokens / peak
            base -= h
            parts.append(f'<rect x="{x:.1f}" y="{base:.1f}" width="{step * 0.7:.1f}" '
                         f'height="{h:.1f}" fill="{colours[model]}">'
                         f'<title>{escape(model)}: {tokens:,} tokens on {day.day}</title></rect>')
        if i % 5 == 0 or i == len(days) - 1:
            parts.append(f'<text x="{x + step * 0.35:.1f}" y="{HEIGHT - 8}" font-size="11" '
                         f'text-anchor="middle" fill="#667">{day.day:%d %b}</text>')
    if budget:
        y = TOP + plot_h * (1 - budget / peak)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                     'stroke="#c0392b" stroke-dasharray="6 4"/>')
        parts.append(f'<text x="{WIDTH - RIGHT}" y="{y - 4:.1f}" text-anchor="end" font-size="11" '
                     f'fill="#c0392b">daily budget {budget:,}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
