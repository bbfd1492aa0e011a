"""The framework every interactive figure shares: the HTML it writes, its assets, rounding for stable output."""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from ..plotting._common import check_drawable

__all__ = ["InteractiveFigure"]


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


_KINDS = ("explorer", "stepper", "mask", "next")
# Limits that keep one figure's page light (the data is inlined in the page).
MAX_EXPLORER_VALUES = 100_000  # L * H * T * T over all texts: about 400 kB of JSON
MAX_TOKENS = 64
MAX_KEYS, MAX_VALUE_WIDTH = 64, 8


# Embedded numbers keep this many significant digits: a figure shows at most four decimals, and a
# different BLAS kernel, SIMD path or thread count moves only the last bits of a float64 result, so the
# rounded data (and the page) are the same on every machine. The course's output policy: book/api.md.
SIGNIFICANT_DIGITS = 6
# The stepper says whether its online result equals the exact softmax to this bound, relative to the
# values' largest magnitude (at least 1): the output is a weighted average of the values, so its rounding
# grows with them. The difference itself is rounding noise, different on every machine, and is embedded
# only when it exceeds the bound.
DIFFERENCE_TOLERANCE = 1e-12


def _rounded(value: Any) -> Any:
    """``value`` (a float, or an array of them) as plain floats with SIGNIFICANT_DIGITS significant digits."""
    array = np.asarray(value, dtype=np.float64)
    flat = [float(f"{x:.{SIGNIFICANT_DIGITS}g}") for x in array.ravel().tolist()]
    return flat[0] if array.ndim == 0 else np.array(flat).reshape(array.shape).tolist()


def _json(value: Any) -> str:
    """JSON safe inside a <script> element: no "<", ">" or "&" at all (no "</script>", no "<!--")."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        raise ValueError("the figure's data must be finite numbers; got NaN or an infinity") from None
    except TypeError as exc:  # a NumPy number or array, a set, a tuple key: JSON has none of them
        raise ValueError(
            f"the figure's data must be JSON: dicts with str keys, lists, str, int, float, bool and None ({exc}); "
            "convert NumPy values with .tolist() or float()"
        ) from None
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@dataclass(frozen=True)
class InteractiveFigure:
    """An interactive figure: its data, the values a test checks it shows, and a static fallback.

    Attributes
    ----------
    kind : str
        ``"explorer"``, ``"stepper"``, ``"mask"`` or ``"next"``: which script draws it.
    title : str
        Shown above the figure.
    data : dict
        What the script draws, JSON-ready.
    expected : dict
        Values the chapter computed with NumPy, which the figure must display
        (the site's browser tests drive the figure and compare).
    fallback_png : bytes
        The static image, for readers without scripts.
    alt : str
        The static image's alt text.
    """

    kind: str
    title: str
    data: dict[str, Any]
    expected: dict[str, Any]
    fallback_png: bytes = field(repr=False)
    alt: str

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}; got {self.kind!r}")
        _check_text(self.title, "title")
        _check_text(self.alt, "alt")
        for name in ("data", "expected"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"{name} must be a dict; got {type(getattr(self, name)).__name__}")
        if not isinstance(self.fallback_png, bytes) or not self.fallback_png.startswith(b"\x89PNG"):
            raise ValueError("fallback_png must be the bytes of a PNG image")
        for name in ("data", "expected"):
            try:
                _json(getattr(self, name))  # refused now, not when the figure is first displayed
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None

    def html(self) -> str:
        """The whole figure as one self-contained HTML fragment."""
        image = base64.b64encode(self.fallback_png).decode("ascii")
        title = html.escape(self.title)
        return (
            f'<div class="sa-widget" data-kind="{self.kind}" role="group" aria-label="{title}">'
            f"<style>{_asset('widgets.css')}</style>"
            f'<p class="sa-title">{title}</p>'
            f'<figure class="sa-fallback"><img src="data:image/png;base64,{image}" alt="{html.escape(self.alt)}">'
            "</figure>"
            f'<script type="application/json" class="sa-data">{_json(self.data)}</script>'
            f'<script type="application/json" class="sa-expected">{_json(self.expected)}</script>'
            f"<script>{_asset('widgets.js')}</script>"
            "</div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": self.html(), "text/plain": f"{self.title} (interactive figure): {self.alt}"}


def _png(figure: Any) -> bytes:
    from ..plotting._common import pyplot

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=72, bbox_inches="tight", metadata={"Software": None})
    pyplot().close(figure)
    return buffer.getvalue()


def _check_text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string; got {value!r}")
    check_drawable(value, name)  # drawn by matplotlib in the static fallback, and written to UTF-8 HTML
    return value
