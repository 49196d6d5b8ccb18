"""HTML building blocks of the web console: the page frame, tables, inline SVG line
charts, and how a record's bytes are shown (text, JSON or hex).

Every value that came from a client or the store (topic and group names, keys, values,
headers, configs, errors) passes through :func:`esc` (``html.escape`` with quotes) or a
helper that calls it; the only unescaped strings are this module's own markup. No
script or style comes from anywhere but the console's static files.
"""

from __future__ import annotations

import html
import json
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

FORMATS = ("text", "json", "hex")
#: the most bytes of one key or value shown
SHOW_BYTES = 8192
NAV = (("/ui", "Overview"), ("/ui/topics", "Topics"), ("/ui/groups", "Consumer groups"),
       ("/ui/schemas", "Schemas"), ("/ui/maintenance", "Maintenance"))


def esc(value: Any) -> str:
    """``value`` as text safe inside HTML elements and quoted attributes."""
    return html.escape(str(value), quote=True)


def url(path: str, **query: Any) -> str:
    """A console URL: ``path`` segments percent-encoded by the caller (:func:`seg`), the
    query encoded here; None values left out."""
    q = {k: v for k, v in query.items() if v is not None}
    return path + ("?" + urlencode(q) if q else "")


def seg(name: str) -> str:
    """A path segment (a topic or group name) percent-encoded."""
    return quote(name, safe="")


def page(title: str, body: str, *, active: str = "", notice: str = "") -> str:
    """A whole console page: the frame, navigation and ``body`` (markup already escaped)."""
    nav = "".join(f'<a href="{href}"{" class=active" if href == active else ""}>{label}</a>'
                  for href, label in NAV)
    note = f'<p class="notice" id="notice">{esc(notice)}</p>' if notice else ""
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            f"<title>{esc(title)} · sparklog</title>"
            '<meta name=viewport content="width=device-width, initial-scale=1">'
            '<link rel=stylesheet href="/ui/static/console.css">'
            '<script src="/ui/static/console.js" defer></script></head><body>'
            f'<header><a class=brand href="/ui">sparklog</a><nav>{nav}</nav>'
            '<label class=refresh><input type=checkbox id=auto-refresh> auto-refresh</label>'
            f'</header><main><h1>{esc(title)}</h1>{note}{body}</main></body></html>')


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, id: str = "",
          numeric: Sequence[int] = ()) -> str:
    """A table; ``headers`` are escaped here, cells must be markup already (use
    :func:`esc`); columns in ``numeric`` are right-aligned."""
    ident = f' id="{esc(id)}"' if id else ""
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{esc(h)}</th>'
                   for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{c}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    if not body:
        body = f'<tr><td colspan={len(headers)} class=empty>none</td></tr>'
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def link(href: str, text: Any) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def num(n: float) -> str:
    """``1,234,567`` (integers), ``12.5`` (others)."""
    return f"{n:,}" if isinstance(n, int) else f"{n:,.1f}"


def size(n: float) -> str:
    """Bytes in binary units: ``0 B``, ``1.5 KiB``, ``2.0 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def when(ms: int | None) -> str:
    """Milliseconds since the epoch as ``2026-11-25 20:49:27.123 UTC``."""
    if not ms:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d} UTC"


# -- records ---------------------------------------------------------------------------------
def show_bytes(data: bytes | None, fmt: str) -> str:
    """Markup for a key, value or header value in ``fmt`` (text, json or hex): null for
    None; JSON pretty-printed, or marked as not JSON and shown as text. Past SHOW_BYTES
    (hex: a quarter of it) the rest is left out, and the size said."""
    if data is None:
        return '<span class=null>null</span>'
    limit = SHOW_BYTES // 4 if fmt == "hex" else SHOW_BYTES
    more = (f' <span class=tag>{len(data) - limit:,} more bytes of {len(data):,}</span>'
            if len(data) > limit else "")
    if more:
        data = data[:limit]
        fmt = "text" if fmt == "json" else fmt  # a cut document is not JSON
    if fmt == "hex":
        return f'<code class=hex>{esc(data.hex(" "))}</code>{more}'
    text = data.decode("utf-8", errors="replace")
    if more:
        return f"<code>{esc(text)}</code>{more}"
    if fmt == "json":
        try:
            doc = json.loads(text)
        except ValueError:
            return f'<span class=tag>not JSON</span> <code>{esc(text)}</code>'
        return f'<pre class=json>{esc(json.dumps(doc, indent=2, ensure_ascii=False))}</pre>'
    return f"<code>{esc(text)}</code>"


def show_headers(headers: Sequence[dict[str, Any]] | None, fmt: str) -> str:
    if not headers:
        return '<span class=null>–</span>'
    return "<br>".join(f'<b>{esc(h["key"])}</b>: {show_bytes(h["value"], fmt)}'
                       for h in headers)


# -- charts ----------------------------------------------------------------------------------
_W, _H, _L, _R, _T, _B = 560, 180, 64, 12, 12, 26


def _nice_max(v: float, binary: bool = False) -> float:
    """A round axis top at or above ``v`` (1, 2, 2.5, 5 x a power of ten, or of 1024 for
    bytes: 10 KiB, not 9.8)."""
    if v <= 0:
        return 1.0
    if binary and v >= 1024:
        scale = 1024 ** math.floor(math.log(v, 1024))
        return _nice_max(v / scale) * scale
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * e:
            return m * e
    return 10 * e  # pragma: no cover


def _short(v: float, unit: str) -> str:
    """``v`` as an axis tick or legend reads it: ``1.5 KiB/s``, ``0.25 B/s``, ``12k rec/s``."""
    if unit == "B/s":
        # below a KiB, whole bytes would print an idle gateway's ticks (0.25, 0.5, 0.75
        # B/s) as "0 B/s" twice and "1 B/s" twice
        return f"{v:.3g} B/s" if abs(v) < 1024 else size(v) + "/s"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}{unit}"
    return f"{v:.3g}{unit}"


def line_chart(series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]], *,
               unit: str = "", id: str = "", title: str = "") -> str:
    """An inline SVG line chart of ``series`` = (label, CSS class, [(time_s, value)]).

    The y axis starts at 0; times are shown as UTC ``HH:MM:SS``. Each series' polyline
    carries ``data-points`` (its number of points). With fewer than two points in all,
    a note says the chart is still collecting.
    """
    pts = [p for _, _, s in series for p in s]
    ident = f' id="{esc(id)}"' if id else ""
    head = f"<figcaption>{esc(title)}</figcaption>" if title else ""
    if len(pts) < 2:
        return (f'<figure class=chart{ident}>{head}<p class=empty>collecting samples…</p>'
                "</figure>")
    t0, t1 = min(p[0] for p in pts), max(p[0] for p in pts)
    top = _nice_max(max(p[1] for p in pts), binary=unit == "B/s")
    span = max(t1 - t0, 1e-9)
    iw, ih = _W - _L - _R, _H - _T - _B

    def xy(t: float, v: float) -> str:
        return f"{_L + (t - t0) / span * iw:.1f},{_T + ih - v / top * ih:.1f}"

    parts = [f'<svg viewBox="0 0 {_W} {_H}" role=img aria-label="{esc(title)}">']
    for i in range(5):
        v = top * i / 4
        y = _T + ih - ih * i / 4
        parts.append(f'<line class=grid x1={_L} x2={_W - _R} y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class=ylab x={_L - 6} y="{y + 4:.1f}">{esc(_short(v, unit))}</text>')
    for i in range(4):
        t = t0 + span * i / 3
        x = _L + iw * i / 3
        anchor = "start" if i == 0 else "end" if i == 3 else "middle"
        parts.append(f'<text class=xlab x="{x:.1f}" y={_H - 6} text-anchor={anchor}>'
                     f'{time.strftime("%H:%M:%S", time.gmtime(t))}</text>')
    legend = []
    for label, cls, s in series:
        if s:
            line = " ".join(xy(t, v) for t, v in s)
            parts.append(f'<polyline class="line {esc(cls)}" data-points={len(s)} '
                         f'points="{line}"><title>{esc(label)}</title></polyline>')
        last = s[-1][1] if s else 0
        legend.append(f'<span class="key {esc(cls)}">{esc(label)}: {esc(_short(last, unit))}'
                      "</span>")
    parts.append("</svg>")
    return f'<figure class=chart{ident}>{head}{"".join(parts)}' \
           f'<div class=legend>{"".join(legend)}</div></figure>'


def format_switch(base: str, current: str, **query: Any) -> str:
    """Links to show the same records as text, JSON or hex."""
    out = []
    for f in FORMATS:
        cls = ' class=active' if f == current else ""
        out.append(f'<a{cls} id="format-{f}" href="{esc(url(base, **query, format=f))}">'
                   f'{f.upper() if f != "text" else "Text"}</a>')
    return f'<span class=switch>{"".join(out)}</span>'
