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
red box. So does Node.js or ``mathjax-full`` missing (``make site`` runs ``npm ci`` first).

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

# Sphinx's mathjax renderer (sphinx.ext.mathjax html_visit_math / html_visit_displaymath): the
# formula's TeX, HTML-escaped, between the configured delimiters; a numbered display formula has
# its <span class="eqno"> before the delimiters, inside the div.
_INLINE = re.compile(r'(<span class="math notranslate nohighlight">)\\\((.*?)\\\)(</span>)', re.S)
_DISPLAY = re.compile(r'(<div class="math notranslate nohighlight"[^>]*>)(.*?)\\\[(.*?)\\\](\s*</div>)', re.S)
# A formula left as TeX after the rewrite: either pattern's opening, then a TeX delimiter.
_LEFT_AS_TEX = re.compile(r'class="math notranslate nohighlight"[^>]*>(?:<span class="eqno">.*?</span>)?\s*\\[(\[]')


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
    """Every formula in an HTML page as ``(tex, display)``, in order: inline ones first, then display ones."""
    if not isinstance(page, str):
        raise StaticMathError(f"find_math: expected the HTML of a page as a str, got {type(page).__name__}")
    inline = [(html.unescape(m.group(2)), False) for m in _INLINE.finditer(page)]
    display = [(html.unescape(m.group(3)), True) for m in _DISPLAY.finditer(page)]
    return inline + display


def replace_math(page: str, markup: list[str]) -> str:
    """``page`` with its formulas, in :func:`find_math`'s order, replaced by ``markup``."""
    inline_count = len(_INLINE.findall(page))
    expected = inline_count + len(_DISPLAY.findall(page))
    if not isinstance(markup, list) or len(markup) != expected:
        got = len(markup) if isinstance(markup, list) else type(markup).__name__
        raise StaticMathError(f"replace_math: expected markup for the page's {expected} formulas, got {got}")
    inline, display = iter(markup[:inline_count]), iter(markup[inline_count:])
    page = _INLINE.sub(lambda m: m.group(1) + next(inline) + m.group(3), page)
    return _DISPLAY.sub(lambda m: m.group(1) + m.group(2) + next(display) + m.group(4), page)


class Typesetter:
    """One Node.js process running ``static_math.js``, typesetting a page per call."""

    def __init__(self, node: str = "node", mathjax: Path = MATHJAX) -> None:
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
    left = _LEFT_AS_TEX.search(page)
    if left:
        raise StaticMathError(f"{path.relative_to(site)}: a formula is still TeX after typesetting: {left.group(0)!r}")
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
