"""book/_ext/static_math.py: every formula typeset when the site is built, so no page loads MathJax (issue 32).

The unit tests run the extension's parts on small pages. Those that typeset need Node.js and the npm package
mathjax-full (``npm ci``, which ``make site`` runs); without them they are skipped with a message, except under
CI=true, where they fail. The checks of the built site read _build/html (SITE_HTML to check another build).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("SITE_HTML", ROOT / "_build" / "html"))
_spec = importlib.util.spec_from_file_location("static_math", ROOT / "book" / "_ext" / "static_math.py")
static_math = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(static_math)

# What Sphinx's MathJax renderer writes (sphinx.ext.mathjax): inline, then a numbered display formula whose
# TeX has a line break with extra space (`\\[2pt]`, which holds the display delimiter's `\[`) and a `<`.
PAGE = (
    "<html><head><title>t</title></head><body>"
    '<p>Scores <span class="math notranslate nohighlight">\\(q \\cdot k &lt; 1\\)</span> and '
    '<span class="math notranslate nohighlight">\\(\\sqrt{d}\\)</span>.</p>\n'
    '<div class="math notranslate nohighlight" id="equation-one">\n'
    '<span class="eqno">(1.1)<a class="headerlink" href="#equation-one">#</a></span>'
    "\\[\\begin{aligned} a &amp;= b \\\\[2pt] c &amp;= d \\end{aligned}\\]</div>\n"
    "<pre>\\(not math\\)</pre></body></html>"
)


def _skip_or_fail(message: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def typesetter():
    if shutil.which("node") is None or not (static_math.MATHJAX / "package.json").is_file():
        _skip_or_fail("needs Node.js and node_modules/mathjax-full: run `npm ci` (make site does)")
    typesetter = static_math.Typesetter()
    yield typesetter
    typesetter.close()


def _built_pages() -> list[Path]:
    if not (SITE / "index.html").is_file():
        _skip_or_fail(f"no built site in {SITE}: run `make site` first")
    return sorted(path for path in SITE.rglob("*.html") if "_static" not in path.parts)


# ---------------------------------------------------------------- finding and replacing the formulas


def test_find_math_reads_sphinx_markup_in_order_and_unescapes_it():
    assert static_math.find_math(PAGE) == [
        ("q \\cdot k < 1", False),
        ("\\sqrt{d}", False),
        ("\\begin{aligned} a &= b \\\\[2pt] c &= d \\end{aligned}", True),
    ]
    assert static_math.find_math("<p>no maths, \\(in plain text\\)</p>") == []


def test_replace_math_puts_markup_inside_each_element_and_keeps_the_equation_number():
    page = static_math.replace_math(
        PAGE,
        ["<mjx-container>A</mjx-container>", "<mjx-container>B</mjx-container>", "<mjx-container>C</mjx-container>"],
    )
    assert '<span class="math notranslate nohighlight"><mjx-container>A</mjx-container></span>' in page
    assert '<span class="math notranslate nohighlight"><mjx-container>B</mjx-container></span>' in page
    assert (
        '<span class="eqno">(1.1)<a class="headerlink" href="#equation-one">#</a></span><mjx-container>C</mjx-container></div>'
        in page
    )
    assert static_math.find_math(page) == []
    assert "<pre>\\(not math\\)</pre>" in page  # TeX outside a math element is not Sphinx's: left alone


# Math elements whose class list has "math" after other classes, or whose TeX has no delimiters, as
# docutils, myst and myst-nb write them: a {math} directive with :class:, a numbered display whose eqno
# follows a line break, a :nowrap: display, myst's amsmath block, a notebook's text/latex output.
OTHER_FORMS = (
    '<div class="boxed math notranslate nohighlight">\\[a+b\\]</div>\n'
    '<div class="math notranslate nohighlight" id="equation-x">\n<span class="eqno">(1)<a class="headerlink" '
    'href="#equation-x">#</a></span>\\[x\\]</div>\n'
    '<div class="math notranslate nohighlight">\\begin{eqnarray}a &amp;=&amp; b\\end{eqnarray}</div>\n'
    '<div class="amsmath math notranslate nohighlight" id="eq-1">\n<span class="eqno">(2)</span>'
    "\\[\\begin{align}c &amp;= d\\end{align}\\]</div>\n"
    '<div class="output text_latex math notranslate nohighlight">$$\\frac{x}{2}$$</div>\n'
    '<div class="mathematics">not a math element</div>'
)


def test_every_form_of_math_element_is_found_and_replaced():
    assert static_math.find_math(OTHER_FORMS) == [
        ("a+b", True),
        ("x", True),
        ("\\begin{eqnarray}a &=& b\\end{eqnarray}", True),
        ("\\begin{align}c &= d\\end{align}", True),
        ("\\frac{x}{2}", True),
    ]
    assert len(static_math.left_as_tex(OTHER_FORMS)) == 5
    page = static_math.replace_math(OTHER_FORMS, [f"<mjx-container>{i}</mjx-container>" for i in range(5)])
    assert static_math.left_as_tex(page) == [] and static_math.find_math(page) == []
    assert '<span class="eqno">(1)<a class="headerlink" href="#equation-x">#</a></span><mjx-container>1' in page
    assert '<div class="mathematics">not a math element</div>' in page


def test_replace_math_and_find_math_refuse_what_does_not_fit():
    with pytest.raises(ValueError, match="expected markup \\(str\\) for the page's 3 formulas, got 2 of types"):
        static_math.replace_math(PAGE, ["a", "b"])
    with pytest.raises(ValueError, match="expected markup \\(str\\) for the page's 3 formulas, got str"):
        static_math.replace_math(PAGE, "abc")
    with pytest.raises(ValueError, match="got 3 of types \\['int', 'str'\\]"):
        static_math.replace_math(PAGE, ["a", 1, "c"])
    with pytest.raises(ValueError, match="expected the HTML of a page as a str, got bytes"):
        static_math.find_math(PAGE.encode())


def test_the_typesetter_says_what_is_missing(tmp_path):
    with pytest.raises(ValueError, match="expected Node.js \\('no-such-node'\\) on PATH"):
        static_math.Typesetter(node="no-such-node")
    with pytest.raises(ValueError, match="expected node as a str and mathjax as a path, got int and PosixPath"):
        static_math.Typesetter(node=123)
    with pytest.raises(ValueError, match="expected the path of a built HTML page, got 'a.html'"):
        static_math.typeset_page("a.html", tmp_path, None)
    if shutil.which("node") is None:
        return
    with pytest.raises(ValueError, match="expected the npm package mathjax-full in .*run `npm ci`"):
        static_math.Typesetter(mathjax=tmp_path)


# ---------------------------------------------------------------- typesetting (Node.js and MathJax)


def test_a_formula_becomes_mathjax_markup_with_mathml_for_screen_readers(typesetter):
    (inline, display), css = typesetter.typeset([("x_i^\\top W_Q", False), ("\\frac{a}{b}", True)], "../fonts")
    assert inline.startswith('<mjx-container class="MathJax" jax="CHTML">')
    assert display.startswith('<mjx-container class="MathJax" jax="CHTML" display="true" tabindex="0">')
    assert '<mjx-math class=" MJX-TEX" aria-hidden="true">' in inline  # the visible part is hidden from readers
    assert "<math xmlns=" in inline and "<mi>x</mi>" in inline and "<mfrac>" in display  # ... who read the MathML
    # The stylesheet: the page's characters, the shared container style, fonts from the given folder.
    assert "mjx-c.mjx-c1D465.TEX-I::before" in css and 'mjx-container.MathJax[jax="CHTML"] {font-size: 120%;' in css
    assert 'src: url("../fonts/MathJax_Main-Regular.woff")' in css
    assert "mjx-c1D467" not in css  # z is not on this page, so its rule is not either


def test_a_formula_mathjax_cannot_read_stops_the_build_with_its_source(typesetter):
    with pytest.raises(ValueError, match=r'inline math "\\\\softmaxx\(x\)": Undefined control sequence \\softmaxx'):
        typesetter.typeset([("x", False), ("\\softmaxx(x)", False)], "f")
    with pytest.raises(ValueError, match=r'display math "\\\\frac\{1": Missing close brace'):
        typesetter.typeset([("\\frac{1", True)], "f")
    # The process answers the next page after a refusal.
    (markup,), _ = typesetter.typeset([("y", False)], "f")
    assert "mjx-c1D466" in markup
    with pytest.raises(ValueError, match="expected a list of \\(tex, display\\) pairs, got 'abc'"):
        typesetter.typeset("abc", "f")
    with pytest.raises(ValueError, match="expected a scale in \\(0, 10\\], got -1"):
        typesetter.typeset([("y", False)], "f", scale=-1)


def test_a_closed_typesetter_says_so():
    if shutil.which("node") is None or not (static_math.MATHJAX / "package.json").is_file():
        _skip_or_fail("needs Node.js and node_modules/mathjax-full: run `npm ci` (make site does)")
    typesetter = static_math.Typesetter()
    typesetter.close()
    with pytest.raises(ValueError, match="expected an open Typesetter, got one that was closed"):
        typesetter.typeset([("y", False)], "f")


def test_typeset_page_rewrites_a_built_page_in_place(typesetter, tmp_path):
    page = tmp_path / "chapters" / "one.html"
    page.parent.mkdir()
    page.write_text(PAGE, encoding="utf-8")
    assert static_math.typeset_page(page, tmp_path, typesetter) == 3
    text = page.read_text(encoding="utf-8")
    assert text.count("<mjx-container") == 3 and "\\(" not in text.split("<pre>")[0]
    head = text.split("</head>")[0]
    assert head.count('<style id="static-math">') == 1 and 'url("../_static/mathjax-fonts/' in head
    assert static_math.typeset_page(page, tmp_path, typesetter) == 0  # typeset already: nothing to do
    assert page.read_text(encoding="utf-8") == text


# ---------------------------------------------------------------- the built site


def test_no_built_page_loads_mathjax_and_every_formula_arrives_typeset():
    pages_with_math = formulas = 0
    for page in _built_pages():
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(SITE).as_posix()
        head = text.split("</head>", 1)[0]
        assert "window.MathJax" not in text and not re.search(r"<script[^>]*mathjax", text, re.I), name
        math = len(static_math._MATH_ELEMENT.findall(text))
        containers = text.count("<mjx-container ")
        assert containers == math, f"{name}: {math} math elements but {containers} typeset"
        assert static_math.left_as_tex(text) == [], f"{name}: a formula is still TeX"
        assert text.count("<mjx-assistive-mml") == containers, f"{name}: a formula without MathML"
        assert head.count(f'<style id="{static_math.STYLE_ID}">') == (1 if math else 0), name
        for font in re.findall(r'url\("([^"]+\.woff)"\)', head):
            assert (page.parent / font).resolve().is_file(), f"{name}: {font} is not in the built site"
        pages_with_math += bool(math)
        formulas += math
    assert pages_with_math >= 15 and formulas > 1000, (pages_with_math, formulas)


def test_the_site_ships_mathjax_fonts_and_no_mathjax_script():
    _built_pages()
    fonts = sorted(path.name for path in (SITE / static_math.SITE_FONTS).glob("*.woff"))
    assert "MathJax_Main-Regular.woff" in fonts and "MathJax_Math-Italic.woff" in fonts, fonts
    assert not list((SITE / "_static").rglob("tex-chtml*.js")) and not list((SITE / "_static").rglob("startup.js"))


def test_the_npm_package_is_pinned_and_installed_without_scripts():
    package = json.loads((ROOT / "package.json").read_text())
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert package["dependencies"] == {"mathjax-full": "3.2.2"}
    assert lock["packages"]["node_modules/mathjax-full"]["version"] == "3.2.2"
    makefile = (ROOT / "Makefile").read_text()
    assert "npm ci --ignore-scripts" in makefile and re.search(r"^site: .*\$\(NODE_STAMP\)", makefile, re.M)
    assert "node_modules/" in (ROOT / ".gitignore").read_text().split()


def test_headings_with_maths_are_typeset_in_the_sidebar_too():
    # Chapter 1's "Why divide by sqrt(d)?" heading is in the page and in its "On this page" list.
    _built_pages()
    text = (SITE / "chapters" / "01_word_vectors.html").read_text(encoding="utf-8")
    places = re.findall(r"Why divide by (<span class=\"math[^>]*>.{0,40})", text)
    assert len(places) >= 2 and all("<mjx-container" in place for place in places), places
