"""A timeline as a picture, in the style of ``systemd-analyze plot``: an SVG (or a
self-contained HTML page around it, no script, no external file) with a row per
phase, grouped by process, a bar from its start to its end on one time axis, its
name, duration and file:line beside it, and the ready moment as a line.

Every bar is a ``<rect class="phase">`` carrying its phase in ``data-`` attributes
(``data-process``, ``data-name``, ``data-kind``, ``data-start``, ``data-end``, in
seconds since the origin), so that a browser test can check the layout through the
page's geometry.  Stretches no phase covers are drawn, hatched and labelled "not
measured", never left as gaps.
"""

from __future__ import annotations

import math
from html import escape

from initorch.reporting.timeline import NOT_MEASURED, Phase, Timeline

AXIS_PX = 1200  # the width of the time axis
LABEL_PX = 640  # room for the labels right of the last bar
ROW_PX = 18
HEADER_PX = 24
TOP_PX = 48
LEFT_PX = 12

COLOURS = {"process": "#7baaf7", "step": "#f6bf26", "teardown": "#b0b0b0",
           "engine": "#57bb8a", NOT_MEASURED: "url(#unmeasured)"}

_PAGE_STYLE = """
body { font: 13px system-ui, sans-serif; margin: 16px; color: #202124; }
h1 { font-size: 16px; margin: 0 0 8px; }
.legend span { display: inline-block; margin-right: 16px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
            vertical-align: middle; border: 1px solid #3c4043; }
"""
_SVG_STYLE = """
svg text { font: 11px ui-monospace, monospace; fill: #202124; }
svg text.process { font-weight: bold; font-size: 12px; }
svg text.tick { fill: #5f6368; }
svg .grid { stroke: #e0e0e0; }
svg .ready { stroke: #d93025; stroke-width: 2; stroke-dasharray: 6 3; }
svg rect.phase { stroke: #3c4043; stroke-width: 0.5; }
"""


def timeline_svg(timeline: Timeline) -> str:
    """The picture as a standalone SVG document."""
    filled = timeline.with_gaps()
    origin = filled.origin
    span = max(filled.end - origin, 1e-3)
    scale = AXIS_PX / span
    rows: list[str] = []
    y = TOP_PX
    for process in filled.processes:
        phases = sorted((p for p in filled.phases if p.process == process.pid),
                        key=lambda p: (p.start, p.end))
        rows.append(f'<text class="process" x="{LEFT_PX}" y="{y + 16}">'
                    f'{escape(process.name)} (pid {process.pid})</text>')
        y += HEADER_PX
        for phase in phases:
            rows.append(_bar(phase, origin, scale, y))
            y += ROW_PX
        y += ROW_PX // 2
    height = y + ROW_PX
    width = LEFT_PX + AXIS_PX + LABEL_PX
    ready_x = LEFT_PX + (filled.ready_at() - origin) * scale
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" id="timeline" '
             f'data-origin="{origin:.6f}" data-scale="{scale:.6f}" data-left="{LEFT_PX}">',
             f"<style>{_SVG_STYLE}</style>",
             '<defs><pattern id="unmeasured" width="6" height="6" '
             'patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
             '<rect width="6" height="6" fill="#f1f3f4"/>'
             '<line x1="0" y1="0" x2="0" y2="6" stroke="#9aa0a6" stroke-width="2"/>'
             '</pattern></defs>',
             *_grid(span, scale, height),
             *rows,
             f'<line class="ready" x1="{ready_x:.2f}" y1="{TOP_PX - 8}" x2="{ready_x:.2f}" '
             f'y2="{height}"/>',
             f'<text x="{ready_x + 4:.2f}" y="{TOP_PX - 10}" fill="#d93025">ready '
             f'{filled.ready_at() - origin:.3f}s</text>',
             "</svg>"]
    return "\n".join(parts)


def timeline_html(timeline: Timeline, title: str = "initorch start-up timeline") -> str:
    """The picture in a self-contained HTML page, with a title and a legend."""
    legend = "".join(f'<span><i style="background:{_swatch(kind)}"></i>{escape(kind)}</span>'
                     for kind in COLOURS)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{_PAGE_STYLE}</style></head><body>"
            f"<h1>{escape(title)}</h1><div class=\"legend\">{legend}</div>\n"
            f"{timeline_svg(timeline)}\n</body></html>\n")


def _swatch(kind: str) -> str:
    colour = COLOURS[kind]
    return "repeating-linear-gradient(45deg,#f1f3f4 0 3px,#9aa0a6 3px 5px)" \
        if colour.startswith("url(") else colour


def _bar(phase: Phase, origin: float, scale: float, y: float) -> str:
    x = LEFT_PX + (phase.start - origin) * scale
    width = max(phase.duration * scale, 0.0)
    label = f"{phase.name} {phase.duration:.3f}s"
    if phase.status not in (None, "succeeded"):
        label += f" ({phase.status})"
    if phase.kind != NOT_MEASURED:
        label += f" [{phase.thread}]"
    if phase.source:
        label += f" {phase.source}"
    title = label if not phase.detail else f"{label}: {phase.detail}"
    return (f'<g><title>{escape(title)}</title>'
            f'<rect class="phase kind-{phase.kind.replace(" ", "-")}" x="{x:.3f}" '
            f'y="{y + 2}" width="{width:.3f}" height="{ROW_PX - 4}" '
            f'fill="{COLOURS.get(phase.kind, "#c58af9")}" '
            f'data-process="{phase.process}" data-name="{escape(phase.name)}" '
            f'data-kind="{escape(phase.kind)}" data-start="{phase.start - origin:.6f}" '
            f'data-end="{phase.end - origin:.6f}"/>'
            f'<text class="label" x="{x + width + 4:.3f}" y="{y + ROW_PX - 5}">'
            f'{escape(label)}</text></g>')


def _grid(span: float, scale: float, height: int) -> list[str]:
    """Vertical lines at a round step (1, 2 or 5 times a power of ten seconds), about
    ten across the axis, each labelled."""
    raw = span / 10
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    lines = []
    ticks = int(span / step) + 1
    for index in range(ticks + 1):
        seconds = index * step
        x = LEFT_PX + seconds * scale
        lines.append(f'<line class="grid" x1="{x:.2f}" y1="{TOP_PX - 4}" x2="{x:.2f}" '
                     f'y2="{height}"/>')
        lines.append(f'<text class="tick" x="{x + 2:.2f}" y="{TOP_PX - 26}">'
                     f'{seconds:g}s</text>')
    return lines
