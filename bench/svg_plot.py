"""Draws measured curves as a standalone SVG file: no plotting library, only the standard library.

A chart is a list of records {"series": name, "x": number, "seconds": number}; each series becomes
one line with a marker at every point, on log-log axes (sizes double, times span decades), with the
value printed beside the last point of each series. Used by bench/scale.py for the scaling curves
linked from docs/PERFORMANCE.md.
"""
import math
from xml.sax.saxutils import escape

# Colour-blind-safe palette (Okabe-Ito); ours first.
COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
DASHES = ["", "6,4", "2,3", "8,3,2,3"]


def _decades(lo, hi):
    """Tick values 1-2-5 per decade covering [lo, hi]."""
    ticks = []
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi * 1.0001:
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo * 0.9999 <= v <= hi * 1.0001:
                ticks.append(v)
        e += 1
    return ticks


def _fmt_seconds(v):
    if v >= 10:
        return f"{v:.0f} s"
    if v >= 1:
        return f"{v:.1f} s"
    if v >= 0.01:
        return f"{v:.2f} s"
    return f"{v * 1000:.1f} ms"


def _fmt_x(v):
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def render(records, title, x_label, y_label="seconds (log scale)", subtitle="", goal=None,
           width=760, height=460):
    """Returns the SVG text. `goal`: optional (x, seconds, label) drawn as a star and a note."""
    series = []
    for r in records:
        if r["series"] not in series:
            series.append(r["series"])
    points = {s: sorted((float(r["x"]), float(r["seconds"])) for r in records
                        if r["series"] == s and r["seconds"] and r["seconds"] > 0)
              for s in series}
    xs = [x for pts in points.values() for x, _ in pts]
    ys = [y for pts in points.values() for _, y in pts]
    if goal:
        xs.append(goal[0])
        ys.append(goal[1])
    if not xs:
        raise ValueError(f"chart '{title}': no points to draw")
    x_lo, x_hi = min(xs), max(xs)
    if x_lo == x_hi:
        x_lo, x_hi = x_lo / 2, x_hi * 2
    y_lo = 10 ** math.floor(math.log10(min(ys)))
    y_hi = 10 ** math.ceil(math.log10(max(ys)))
    if y_lo == y_hi:
        y_hi *= 10

    # The legend sits right of the plot; the margin grows with the longest series name.
    longest = max(len(s) for s in series)
    left, top, bottom = 78, 58, 56
    right = max(140, int(64 + 6.7 * longest))
    width = max(width, left + right + 420)
    pw, ph = width - left - right, height - top - bottom

    def px(x):
        return left + pw * (math.log2(x) - math.log2(x_lo)) / (math.log2(x_hi) - math.log2(x_lo))

    def py(y):
        return top + ph * (1 - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="24" font-size="16" font-weight="bold">{escape(title)}</text>']
    if subtitle:
        out.append(f'<text x="{left}" y="42" fill="#555">{escape(subtitle)}</text>')
    # Grid and ticks: x at every measured size (powers of two), y at 1-2-5 per decade.
    x_ticks = sorted(set(xs))
    for x in x_ticks:
        X = px(x)
        out.append(f'<line x1="{X:.1f}" y1="{top}" x2="{X:.1f}" y2="{top + ph}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{X:.1f}" y="{top + ph + 16}" text-anchor="middle">{_fmt_x(x)}</text>')
    for y in _decades(y_lo, y_hi):
        Y = py(y)
        out.append(f'<line x1="{left}" y1="{Y:.1f}" x2="{left + pw}" y2="{Y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 6}" y="{Y + 4:.1f}" text-anchor="end">{_fmt_seconds(y)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 14}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text transform="translate(18,{top + ph / 2:.1f}) rotate(-90)" text-anchor="middle">'
               f'{escape(y_label)}</text>')
    if goal:
        gx, gy, glabel = goal
        X, Y = px(gx), py(gy)
        out.append(f'<path d="M{X - 7:.1f},{Y:.1f} L{X + 7:.1f},{Y:.1f} M{X:.1f},{Y - 7:.1f} L{X:.1f},{Y + 7:.1f}" '
                   f'stroke="#000" stroke-width="2"/>')
        # Left of the mark, unless that would leave the picture.
        anchor, tx = ("end", X - 10) if X - left > 7 * len(glabel) else ("start", X + 10)
        out.append(f'<text x="{tx:.1f}" y="{Y - 9:.1f}" text-anchor="{anchor}" fill="#000">{escape(glabel)}</text>')
    # Series: line, markers, last value; legend on the right.
    for i, s in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        dash = DASHES[(i // len(COLOURS)) % len(DASHES)] if i >= len(COLOURS) else ""
        pts = points[s]
        if not pts:
            continue
        path = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(pts))
        out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2.2"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{colour}">'
                       f'<title>{escape(s)}: {_fmt_x(x)} -> {_fmt_seconds(y)}</title></circle>')
        lx, ly = pts[-1]
        out.append(f'<text x="{px(lx) + 6:.1f}" y="{py(ly) - 6:.1f}" fill="{colour}">{_fmt_seconds(ly)}</text>')
        LY = top + 14 + 20 * i
        out.append(f'<line x1="{left + pw + 16}" y1="{LY - 4}" x2="{left + pw + 40}" y2="{LY - 4}" '
                   f'stroke="{colour}" stroke-width="2.2"/>')
        out.append(f'<text x="{left + pw + 46}" y="{LY}">{escape(s)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write(path, records, title, x_label, **kwargs):
    with open(path, "w") as f:
        f.write(render(records, title, x_label, **kwargs))
