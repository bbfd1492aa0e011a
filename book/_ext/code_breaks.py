"""Let long inline code wrap on a phone at ``_``, ``.``, ``/`` and camel-case humps, never inside a word.

Sphinx writes inline code and the names in API signatures as ``<span class="pre">name</span>`` with
``white-space: nowrap``, so ``torch.nn.functional.scaled_dot_product_attention`` widened the page on a
phone; breaking it anywhere (``overflow-wrap: anywhere``) split words ("attention_b|ackward"). This
extension puts a ``<wbr>`` (a break opportunity that adds no character when copied) after each
``_``, ``.`` and ``/``, and, in a part longer than 16 characters, between a lower-case and an upper-case
letter (``TransformerEncoder<wbr>Layer``, too long for a phone's line on its own), inside every
``<span class="pre">`` (Sphinx uses that class for nothing else; Pygments' code blocks do not), in
every page's body, when the page is written. book/_static/course.css lets those spans wrap.

Headings the other way round: a hyphenated name in a heading ("all-MiniLM-L6-v2", "SmolLM2-135M")
broke at a hyphen on a phone, leaving "v2" alone on the next line. :func:`keep_hyphenated_words` wraps
each hyphenated word of a heading's text in ``<span class="nobreak">``, which course.css keeps on
one line.
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


_HEADING = re.compile(r"(<h[1-6]\b[^>]*>)(.*?)(</h[1-6]>)", re.S)
_TAG_OR_TEXT = re.compile(r"(<[^>]*>)|([^<]+)")
_HYPHENATED = re.compile(r"(?<![\w-])\w[\w.]*(?:-\w[\w.]*)+")


def _keep_in_heading(inner: str) -> str:
    out, skip = [], False
    for match in _TAG_OR_TEXT.finditer(inner):
        tag, text = match.group(1), match.group(2)
        if tag:
            # Text right after a nobreak span (already wrapped) or a math span (TeX, typeset later) stays.
            skip = tag == '<span class="nobreak">' or tag.startswith('<span class="math')
            out.append(tag)
        else:
            out.append(text if skip else _HYPHENATED.sub(r'<span class="nobreak">\g<0></span>', text))
    return "".join(out)


def keep_hyphenated_words(html: str) -> str:
    """``html`` with each hyphenated word in the text of its headings wrapped in ``<span class="nobreak">``;
    idempotent, and TeX in a heading is left alone."""
    if not isinstance(html, str):
        raise ValueError(f"keep_hyphenated_words expects the page body as a str, got {type(html).__name__}")
    return _HEADING.sub(lambda m: m.group(1) + _keep_in_heading(m.group(2)) + m.group(3), html)


def _page_context(app, pagename, templatename, context, doctree) -> None:
    if "body" in context:
        context["body"] = keep_hyphenated_words(add_breaks(context["body"]))


def setup(app):
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
