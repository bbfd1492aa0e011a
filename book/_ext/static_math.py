"""Typeset every formula when the site is built, so no page loads MathJax (issue 32: page weight).

Sphinx's MathJax renderer writes each formula into the page as TeX (``\\(...\\)`` in a
``span.math``, ``\\[...\\]`` in a ``div.math``) and adds MathJax's scripts, which typeset it in
the reader's browser: about 810 kB of JavaScript on every page with maths, more than the rest
of a chapter page together. Here the same MathJax (3.2.2, from the npm package ``mathjax-full``
that ``package.json`` pins) runs once at build time, under Node.js, through
``static_math.js``. After the build, each HTML page's formulas are replaced by MathJax's
CommonHTML markup, and the page's head gets the stylesheet for the characters that page uses
(a few kB). The MathJax fonts, only those a page's text needs, are fetched by the browser from
``_static/mathjax-fonts/``. What a reader sees is what MathJax shows in a browser, with two
differences:

- The size. In a browser MathJax scales formulas to the x-height of the text around them
  (127% beside the fonts of the Linux machine the tests run on); a page built in advance cannot
  know the reader's font, so every formula is drawn at ``static_math_scale`` (1.2: what
  Roboto, San Francisco and Arial, the system fonts the theme asks for, give).
- Screen readers get the formula. Each formula carries MathJax's assistive MathML; the
  browser-side set-up this replaces loaded no accessibility code, so they got nothing.

A formula MathJax cannot parse stops the build with its page and source, instead of showing a
red box. So does Node.js or ``mathjax-full`` missing (``make site`` runs ``npm ci`` first). Only
the TeX packages ``base`` and ``ams`` are loaded (what the chapters use; the browser set-up this
replaces loaded ``ams`` too): a formula that needs another (``\\boldsymbol``, ``\\color``,
``\\newcommand``) stops the build until ``static_math.js`` loads that package.

Formulas are found by the class list of their element (``math`` among its classes), so a
numbered or ``:nowrap:`` display, a ``{math}`` directive's own classes, myst's ``amsmath`` blocks
and a notebook's LaTeX output are typeset too; a math element left untypeset stops the build.

Enabled in ``_config.yml``: ``static_math: book/_ext`` under ``sphinx: local_extensions`` and
``static_math`` in ``sphinx: config: extensions``. ``tests/test_static_math.py`` checks the
built pages and the extension's parts.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "static_math.js"
# Where `npm ci` at the repository's root puts MathJax, and where its web fonts are in the package.
MATHJAX = HERE.parents[1] / "node_modules" / "mathjax-full"
FONTS = Path("es5") / "output" / "chtml" / "fonts" / "woff-v2"
# Where the built site keeps the fonts, under the output directory.
SITE_FONTS = Path("_static") / "mathjax-fonts"
SCALE = 1.2
STYLE_ID = "static-math"

# Every element that holds a formula for MathJax: a span or div whose class list has "math" (Sphinx's
# `math notranslate nohighlight`, and with other classes before it: myst's `amsmath math ...`, a
# notebook's LaTeX output `output text_latex math ...`, a {math} directive's :class:). Sphinx's
# mathjax renderer (sphinx.ext.mathjax) writes the TeX HTML-escaped between delimiters, \(...\) inline
# and \[...\] in a display, or bare for a :nowrap: display; a numbered display has its
# <span class="eqno"> first.
_MATH_ELEMENT = re.compile(r'(<(span|div)\b[^>]*\bclass="(?:[^"]*\s)?math(?:\s[^"]*)?"[^>]*>)(.*?)(</\2>)', re.S)
_CONTENT = re.compile(r'(\s*(?:<span class="eqno">.*?</span>)?\s*)(.*?)(\s*)$', re.S)
_DELIMITERS = {"span": [("\\(", "\\)"), ("$", "$")], "div": [("\\[", "\\]"), ("$$", "$$")]}
TYPESET = "<mjx-container"


def _parts(match: re.Match) -> tuple[str, str, str, str, str, str]:
    """A math element's opening tag, tag name, equation number (with spaces), TeX, trailing space, closing tag."""
    opening, tag, content, closing = match.group(1), match.group(2), match.group(3), match.group(4)
    before, tex, after = _CONTENT.match(content).groups()
    return opening, tag, before, tex, after, closing


def _tex(tag: str, text: str) -> str:
    """The TeX of a math element's text: without its delimiters, unescaped."""
    for left, right in _DELIMITERS[tag]:
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            return html.unescape(text[len(left) : len(text) - len(right)])
    return html.unescape(text)  # a :nowrap: display: the TeX itself, such as \begin{eqnarray}...


class StaticMathError(ValueError):
    """What stopped the typesetting: a formula MathJax refused, or Node.js or MathJax missing."""


def _is_mathjax(script: Any, mathjax_path: str) -> bool:
    """Whether a page's script is MathJax itself or the ``window.MathJax`` configuration Sphinx writes before it."""
    filename = str(getattr(script, "filename", script) or "")
    body = (getattr(script, "attributes", None) or {}).get("body", "")
    # The builder stores a local file's name under _static/ (sphinx.builders.html add_js_file).
    return filename in (mathjax_path, f"_static/{mathjax_path}") or body.startswith("window.MathJax = ")


def drop_mathjax(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """Remove MathJax's scripts from every page: its formulas are typeset when the site is built.

    Runs after ``sphinx.ext.mathjax`` (priority 500) has added them.
    """
    if app.builder.format != "html":
        return
    scripts = context.get("script_files")
    if isinstance(scripts, list):
        scripts[:] = [script for script in scripts if not _is_mathjax(script, app.config.mathjax_path)]


def find_math(page: str) -> list[tuple[str, bool]]:
    """Every formula still to typeset in an HTML page as ``(tex, display)``, in page order."""
    if not isinstance(page, str):
        raise StaticMathError(f"find_math: expected the HTML of a page as a str, got {type(page).__name__}")
    found = []
    for match in _MATH_ELEMENT.finditer(page):
        _, tag, _, text, _, _ = _parts(match)
        if not text.startswith(TYPESET):
            found.append((_tex(tag, text), tag == "div"))
    return found


def replace_math(page: str, markup: list[str]) -> str:
    """``page`` with its formulas, in :func:`find_math`'s order, replaced by ``markup`` (a str each)."""
    expected = len(find_math(page))
    if not isinstance(markup, list) or len(markup) != expected or not all(isinstance(m, str) for m in markup):
        got = (
            f"{len(markup)} of types {sorted({type(m).__name__ for m in markup})}"
            if isinstance(markup, list)
            else type(markup).__name__
        )
        raise StaticMathError(f"replace_math: expected markup (str) for the page's {expected} formulas, got {got}")
    pieces = iter(markup)

    def replace(match: re.Match) -> str:
        opening, _, before, text, after, closing = _parts(match)
        return match.group(0) if text.startswith(TYPESET) else opening + before + next(pieces) + after + closing

    return _MATH_ELEMENT.sub(replace, page)


def left_as_tex(page: str) -> list[str]:
    """The start of each math element in ``page`` that does not hold typeset markup."""
    return [match.group(0)[:120] for match in _MATH_ELEMENT.finditer(page) if not _parts(match)[3].startswith(TYPESET)]


class Typesetter:
    """One Node.js process running ``static_math.js``, typesetting a page per call."""

    def __init__(self, node: str = "node", mathjax: Path = MATHJAX) -> None:
        if not isinstance(node, str) or not isinstance(mathjax, (str, Path)):
            raise StaticMathError(
                f"Typesetter: expected node as a str and mathjax as a path, got {type(node).__name__} "
                f"and {type(mathjax).__name__}"
            )
        if shutil.which(node) is None:
            raise StaticMathError(
                f"static_math: expected Node.js ({node!r}) on PATH to typeset the maths, found none; "
                "install Node.js 18 or newer (Debian: apt install nodejs npm)"
            )
        if not (Path(mathjax) / "package.json").is_file():
            raise StaticMathError(
                f"static_math: expected the npm package mathjax-full in {mathjax}, found none; "
                "run `npm ci` at the repository's root (make site does)"
            )
        self._process = subprocess.Popen(
            [node, str(SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env={**os.environ, "NODE_PATH": str(Path(mathjax).parent)},
        )

    def typeset(self, math: list[tuple[str, bool]], font_url: str, scale: float = SCALE) -> tuple[list[str], str]:
        """MathJax's markup for each formula, and the stylesheet they need."""
        if not isinstance(math, list) or not all(
            isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str) for item in math
        ):
            raise StaticMathError(f"typeset: expected a list of (tex, display) pairs, got {str(math)[:80]!r}")
        if not isinstance(font_url, str):
            raise StaticMathError(f"typeset: expected the fonts' address as a str, got {type(font_url).__name__}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 10:
            raise StaticMathError(f"typeset: expected a scale in (0, 10], got {scale!r}")
        if self._process.poll() is not None or self._process.stdin is None or self._process.stdin.closed:
            raise StaticMathError("typeset: expected an open Typesetter, got one that was closed")
        request = {"math": [[tex, bool(display)] for tex, display in math], "fontURL": font_url, "scale": scale}
        assert self._process.stdin is not None and self._process.stdout is not None
        try:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            stderr = self._process.stderr.read() if self._process.stderr else ""
            raise StaticMathError(f"static_math: Node.js stopped before answering:\n{stderr.strip()}")
        reply = json.loads(line)
        if reply["errors"]:
            raise StaticMathError("MathJax could not typeset:\n  " + "\n  ".join(reply["errors"]))
        return reply["html"], reply["css"]

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)


def typeset_page(path: Path, site: Path, typesetter: Typesetter, scale: float = SCALE) -> int:
    """Typeset the formulas of one built page in place; return how many there were."""
    if not isinstance(path, Path) or not path.is_file():
        raise StaticMathError(f"typeset_page: expected the path of a built HTML page, got {path!r}")
    page = path.read_text(encoding="utf-8")
    math = find_math(page)
    if not math:
        return 0
    font_url = Path(os.path.relpath(site / SITE_FONTS, path.parent)).as_posix()
    try:
        markup, css = typesetter.typeset(math, font_url, scale)
    except StaticMathError as error:
        raise StaticMathError(f"{path.relative_to(site)}: {error}") from None
    page = replace_math(page, markup)
    left = left_as_tex(page)
    if left:
        raise StaticMathError(f"{path.relative_to(site)}: a formula is still TeX after typesetting: {left[0]!r}")
    if "</head>" not in page:
        raise StaticMathError(f"{path.relative_to(site)}: expected a </head> to put the maths' stylesheet before")
    style = f'<style id="{STYLE_ID}">{css}</style>\n'
    page = page.replace("</head>", style + "</head>", 1)
    path.write_text(page, encoding="utf-8")
    return len(math)


def typeset_site(app: Any, exception: Exception | None) -> None:
    """After an HTML build: typeset every page's formulas and copy MathJax's fonts into ``_static``."""
    if exception is not None or app.builder.format != "html":
        return
    site = Path(app.outdir)
    mathjax = Path(app.config.static_math_mathjax)
    typesetter = Typesetter(mathjax=mathjax)
    try:
        formulas = sum(
            typeset_page(path, site, typesetter, app.config.static_math_scale) for path in sorted(site.rglob("*.html"))
        )
    finally:
        typesetter.close()
    target = site / SITE_FONTS
    target.mkdir(parents=True, exist_ok=True)
    for font in sorted((mathjax / FONTS).glob("*.woff")):
        shutil.copyfile(font, target / font.name)
    print(f"static_math: typeset {formulas} formulas")


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("static_math_scale", SCALE, "html", types=[float])
    app.add_config_value("static_math_mathjax", str(MATHJAX), "html", types=[str])
    app.connect("html-page-context", drop_mathjax, priority=600)
    app.connect("build-finished", typeset_site)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
