"""Inline SVG heatmaps of a failing output: expected, actual, and the error as a fraction of its bound.

Self-contained (no script, no external asset) so the HTML report opens anywhere, CI artifact
viewers included. Matrices are shown in the port's layout (a Julia port's weights key x query).

Size: a small array (at most ``MAX_TITLED`` cells) is one ``<rect>`` per element, titled with its
position as the port indexes it and its value (hover). A larger one is pooled into at most
``MAX_CELLS`` x ``MAX_CELLS`` blocks (a value block shows NaN if any element in it is NaN, its mean
otherwise; an error block the worst element in it, so a single bad element stays visible) and drawn
as one inline PNG image, a few KB whatever the array's size; its label says how it was pooled.
Per-element ``<rect>`` markup made a 20-failure report 2 to 5 MB.

Colours: values on one diverging scale shared by expected and actual (blue negative, white zero,
red positive; grey NaN, black an infinity); the error green up to its bound (``<= 1``: agrees),
then yellow to dark red on a log scale up to ``1e16`` times the bound, purple for a NaN or an
infinity where a number belongs. Each row of heatmaps ends with its values' colour scale (``value_scale``),
numbered with that row's own value range; the error's scale, the same for all, heads the failures
(``legend``).
"""

from __future__ import annotations

import base64
import html
import math
import struct
import zlib
from collections.abc import Sequence

import numpy as np

MAX_CELLS = 64  # blocks per axis, at most, for an array drawn as an image
MAX_TITLED = 64  # arrays of at most this many elements get one titled <rect> each
MIN_WIDTH = 190  # room for the title and the axis label under a narrow array
NAN_COLOUR = "#9e9e9e"
INF_COLOUR = "#000000"
NONFINITE_ERROR = "#7b1fa2"


def _diverging(x: float, scale: float) -> str:
    if math.isnan(x):
        return NAN_COLOUR
    if math.isinf(x):
        return INF_COLOUR
    t = max(-1.0, min(1.0, x / scale)) if scale > 0 else 0.0
    if t >= 0:  # white -> red
        r, g, b = 255, int(255 - 200 * t), int(255 - 210 * t)
    else:  # white -> blue
        r, g, b = int(255 + 210 * t), int(255 + 150 * t), 255
    return f"#{r:02x}{g:02x}{b:02x}"


def _error(ratio: float) -> str:
    if math.isnan(ratio) or math.isinf(ratio):
        return NONFINITE_ERROR
    if ratio <= 1.0:  # agrees: pale to full green with the share of the budget used
        t = max(0.0, ratio)
        return f"#{int(232 - 140 * t):02x}{int(245 - 60 * t):02x}{int(233 - 140 * t):02x}"
    t = min(1.0, math.log10(ratio) / 16.0)  # 1 .. 1e16 x bound: yellow -> dark red
    return f"#{int(255 - 120 * t):02x}{int(214 - 214 * t):02x}{int(79 - 79 * t):02x}"


def _as_matrix(a: np.ndarray) -> np.ndarray:
    if a.ndim == 0:
        return a.reshape(1, 1)
    if a.ndim == 1:
        return a.reshape(1, -1)
    return a


def _edges(n: int) -> list[int]:
    k = min(n, MAX_CELLS)
    return [round(i * n / k) for i in range(k + 1)]


def _reduce(m: np.ndarray, kind: str) -> np.ndarray:
    """``m`` in at most MAX_CELLS x MAX_CELLS blocks: an error block its worst ratio (inf where one
    is not finite), a value block its mean (NaN where one is NaN). Whole-array reductions, not a
    loop over the 4,096 blocks (30 ms a heatmap; a report of twenty large failures drew 240)."""
    rows, cols = _edges(m.shape[0]), _edges(m.shape[1])
    if len(rows) - 1 == m.shape[0] and len(cols) - 1 == m.shape[1]:
        return m
    starts_r, starts_c = rows[:-1], cols[:-1]

    def blocks(ufunc: np.ufunc, a: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # inf and -inf in one block: its mean is NaN, quietly
            return ufunc.reduceat(ufunc.reduceat(a, starts_r, axis=0), starts_c, axis=1)

    if kind == "error":
        finite = np.isfinite(m)
        worst = blocks(np.maximum, np.where(finite, m, -np.inf))
        return np.where(blocks(np.add, (~finite).astype(np.int64)) > 0, np.inf, worst)
    sizes = np.outer(np.diff(rows), np.diff(cols))
    means = blocks(np.add, np.where(np.isnan(m), 0.0, m)) / sizes
    return np.where(blocks(np.add, np.isnan(m).astype(np.int64)) > 0, np.nan, means)


def _rgb(colour: str) -> bytes:
    return bytes.fromhex(colour[1:])


def _png(rows: Sequence[Sequence[str]]) -> bytes:
    """An 8-bit indexed-colour PNG of rows of ``#rrggbb`` colours (at most 256 distinct ones)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    palette = list(dict.fromkeys(c for row in rows for c in row))
    if len(palette) > 256:
        raise ValueError(f"{len(palette)} colours: an indexed PNG holds 256 (quantize first: _quantized)")
    index = {c: i for i, c in enumerate(palette)}
    raw = b"".join(b"\x00" + bytes(index[c] for c in row) for row in rows)  # filter type 0 on every row
    header = struct.pack(">IIBBBBB", len(rows[0]), len(rows), 8, 3, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"PLTE", b"".join(_rgb(c) for c in palette))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def _quantized(v: float, kind: str, scale: float) -> float:
    """A value rounded to one of the few colours an image draws (at most 256 in all, so the PNG is
    indexed and small): values to 1/32 of the scale, errors to 1/16 of the bound up to it and to
    quarter decades beyond."""
    if not math.isfinite(v):
        return v
    if kind != "error":
        return round(v / scale * 32) / 32 * scale if scale > 0 else 0.0
    if v <= 1.0:
        return round(v * 16) / 16
    return 10.0 ** (round(math.log10(v) * 4) / 4)


def svg(
    array: np.ndarray,
    kind: str,
    title: str,
    *,
    scale: float = 1.0,
    name: str = "",
    base: int = 0,
    axis_names: Sequence[str] | None = None,
    attrs: dict[str, str] | None = None,
) -> str:
    """One heatmap. ``kind``: "expected" or "actual" (diverging, ``scale`` = the largest |value|),
    or "error" (err/bound). ``name`` and ``base`` title each cell as the port indexes it."""
    m = _as_matrix(np.asarray(array, dtype=np.float64))
    titled = m.size <= MAX_TITLED
    shown = m if titled else _reduce(m, kind)
    blocked = shown.shape != m.shape
    rows, cols = shown.shape
    px = max(4, min(22, 264 // max(rows, cols)))
    top, left = 18, 4
    width, height = max(MIN_WIDTH, left + cols * px + 4), top + rows * px + 16
    extra = "".join(f' {k}="{html.escape(v)}"' for k, v in (attrs or {}).items())
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" data-kind="{kind}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img"{extra}>',
        f'<text x="{left}" y="12" class="hm-title">{html.escape(title)}</text>',
    ]

    def colour(v: float) -> str:
        return _error(v) if kind == "error" else _diverging(v, scale)

    if titled:
        for i in range(rows):
            for j in range(cols):
                v = float(shown[i, j])
                if array.ndim == 0:
                    where = name
                elif array.ndim == 1:
                    where = f"{name}[{j + base}]"
                else:
                    where = f"{name}[{i + base}, {j + base}]"
                value = "NaN" if math.isnan(v) else f"{v:.6g}" + (" x bound" if kind == "error" else "")
                parts.append(
                    f'<rect x="{left + j * px}" y="{top + i * px}" width="{px}" height="{px}" fill="{colour(v)}">'
                    f"<title>{html.escape(where)}: {html.escape(value)}</title></rect>"
                )
    else:
        pixels = [[colour(_quantized(float(v), kind, scale)) for v in row] for row in shown]
        data = base64.b64encode(_png(pixels)).decode("ascii")
        pooled = "the worst element of each block" if kind == "error" else "the mean of each block (NaN if any is)"
        how = f"{m.shape[0]} x {m.shape[1]}" + (f" in {rows} x {cols} blocks, {pooled}" if blocked else "")
        parts.append(
            f'<image x="{left}" y="{top}" width="{cols * px}" height="{rows * px}" preserveAspectRatio="none" '
            f'image-rendering="optimizeSpeed" style="image-rendering:pixelated" href="data:image/png;base64,{data}">'
            f"<title>{html.escape(name or title)}: {html.escape(how)}</title></image>"
        )
    if axis_names and len(axis_names) == 2 and array.ndim == 2:
        label = f"rows: {axis_names[0]}, columns: {axis_names[1]}"
    elif array.ndim == 1 and axis_names:
        label = f"{axis_names[0]}s"
    else:
        label = ""
    if blocked:
        pooled = "worst" if kind == "error" else "mean"
        label += f" ({m.shape[0]} x {m.shape[1]} pooled to {rows} x {cols}: {pooled} of each)"
    if label:
        parts.append(f'<text x="{left}" y="{height - 4}" class="hm-axis">{html.escape(label.strip())}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _bar(title: str, colours: Sequence[str], ticks: Sequence[tuple[int, str]], kind: str) -> str:
    """A horizontal colour bar (one inline PNG, a few hundred bytes), numbered under the given stops."""
    w, left = 8, 4
    width = max(MIN_WIDTH, left + len(colours) * w + 40, left + 7 * len(title))  # ~7 px a character
    data = base64.b64encode(_png([colours])).decode("ascii")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="colour-scale" data-kind="{kind}" width="{width}" '
        f'height="48" viewBox="0 0 {width} 48" role="img">',
        f'<text x="{left}" y="12" class="hm-title">{html.escape(title)}</text>',
        f'<image x="{left}" y="18" width="{len(colours) * w}" height="12" preserveAspectRatio="none" '
        f'image-rendering="optimizeSpeed" style="image-rendering:pixelated" href="data:image/png;base64,{data}"/>',
    ]
    for k, text in ticks:
        parts.append(f'<text x="{left + k * w}" y="42" class="hm-axis">{html.escape(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def value_scale(scale: float) -> str:
    """The colour scale of one row of heatmaps' values, from -``scale`` to +``scale`` (that row's own
    largest magnitude)."""
    n = 21
    colours = [_diverging(-scale + 2 * scale * k / (n - 1), scale) for k in range(n)]
    return _bar(
        "colour scale: values", colours, [(0, f"{-scale:.3g}"), (n // 2, "0"), (n - 4, f"{scale:.3g}")], "values"
    )


def error_scale() -> str:
    """The colour scale of every error heatmap: |actual - expected| / bound, the same on every row."""
    ratios = [0.0, 0.25, 0.5, 0.75, 1.0] + [10.0**e for e in range(1, 17)]
    colours = [_error(x) for x in ratios] + [NONFINITE_ERROR]
    ticks = [(0, "0"), (4, "1"), (8, "1e4"), (16, "1e12"), (21, "NaN")]
    return _bar("colour scale: |actual - expected| / bound", colours, ticks, "error")


def triple(
    expected: np.ndarray,
    actual: np.ndarray,
    ratio: np.ndarray,
    *,
    name: str,
    base: int,
    axis_names: Sequence[str] | None,
    attrs: dict[str, str],
) -> str:
    """Expected, actual and error side by side (a 2-D slice or a whole 0-D/1-D/2-D array)."""
    finite = np.concatenate([expected[np.isfinite(expected)].ravel(), actual[np.isfinite(actual)].ravel()])
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    common = {"scale": scale, "name": name, "base": base, "axis_names": axis_names}
    return (
        '<div class="hm-row">'
        + svg(expected, "expected", "expected", attrs=attrs, **common)  # type: ignore[arg-type]
        + svg(actual, "actual", "actual", attrs=attrs, **common)  # type: ignore[arg-type]
        + svg(ratio, "error", "|actual - expected| / bound", attrs=attrs, **common)  # type: ignore[arg-type]
        + value_scale(scale)
        + "</div>"
    )


def pair(expected: np.ndarray, actual: np.ndarray, *, attrs: dict[str, str], titles: tuple[str, str]) -> str:
    """Expected and actual side by side when their shapes differ (no element-wise error)."""
    finite = np.concatenate([expected[np.isfinite(expected)].ravel(), actual[np.isfinite(actual)].ravel()])
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    return (
        '<div class="hm-row">'
        + svg(expected, "expected", titles[0], scale=scale, attrs=attrs)
        + svg(actual, "actual", titles[1], scale=scale, attrs=attrs)
        + value_scale(scale)
        + "</div>"
    )


def legend() -> str:
    def swatch(colour: str, text: str) -> str:
        return f'<span class="sw" style="background:{colour}"></span>{html.escape(text)}'

    return (
        '<p class="legend">values: '
        + swatch(_diverging(-1, 1), "negative")
        + swatch("#ffffff", "zero")
        + swatch(_diverging(1, 1), "positive")
        + swatch(NAN_COLOUR, "NaN")
        + swatch(INF_COLOUR, "infinity")
        + " &nbsp; error: "
        + swatch(_error(0.0), "0")
        + swatch(_error(1.0), "at the bound")
        + swatch(_error(1e3), "1e3 x bound")
        + swatch(_error(1e16), "1e16 x bound")
        + swatch(NONFINITE_ERROR, "NaN/infinity where a number belongs")
        + "</p>"
        + error_scale()
    )
