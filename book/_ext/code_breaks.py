"""Let long inline code wrap on a phone at ``_``, ``.``, ``/`` and camel-case humps, never inside a word.

Sphinx writes inline code and the names in API signatures as ``<span class="pre">name</span>`` with
``white-space: nowrap``, so ``torch.nn.functional.scaled_dot_product_attention`` widened the page on a
phone; breaking it anywhere (``overflow-wrap: anywhere``) split words ("attention_b|ackward"). This
extension puts a ``<wbr>`` (a break opportunity that adds no character when copied) after each
``_``, ``.`` and ``/``, and, in a part longer than 16 characters, between a lower-case and an upper-case
letter (``TransformerEncoder<wbr>Layer``, too long for a phone's line on its own), inside every
``<span class="pre">`` (Sphinx uses that class for nothing else; Pygments' code blocks do not), in
every page's body, when the page is written. book/_static/course.css lets those spans wrap.
"""

from __future__ import annotations

import re

_PRE = re.compile(r'(<span class="pre">)([^<]*)(</span>)')
# After "_", "." or "/", unless another of them or the end follows (a break there would do nothing).
_AFTER_SEPARATOR = re.compile(r"(?<=[_./])(?=[^_./\s])")
# A camel-case hump, used only inside a part longer than LONG_PART characters: a short name such as
# ValueError fits a line, and breaking it would only split it where the line happens to end.
_HUMP = re.compile(r"(?<=[a-z])(?=[A-Z])")
_PART = re.compile(r"[^_./\s]+")
LONG_PART = 16


def _with_breaks(text: str) -> str:
    text = _PART.sub(lambda m: _HUMP.sub("\x00", m.group(0)) if len(m.group(0)) > LONG_PART else m.group(0), text)
    return _AFTER_SEPARATOR.sub("\x00", text).replace("\x00", "<wbr>")


def add_breaks(html: str) -> str:
    """``html`` with ``<wbr>`` after each ``_``, ``.`` and ``/`` of its literal text, and at the camel humps of
    parts longer than ``LONG_PART`` characters; idempotent."""
    if not isinstance(html, str):
        raise ValueError(f"add_breaks expects the page body as a str, got {type(html).__name__}")
    return _PRE.sub(lambda m: m.group(1) + _with_breaks(m.group(2)) + m.group(3), html)


def _page_context(app, pagename, templatename, context, doctree) -> None:
    if "body" in context:
        context["body"] = add_breaks(context["body"])


def setup(app):
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
