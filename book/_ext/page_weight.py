"""Keep what every page loads to what that page uses (issue 32: page weight).

One thing the theme adds to pages that do not need it:

- The search index. pydata-sphinx-theme loads ``searchindex.js`` (over 200 kB),
  ``searchtools.js`` and ``language_data.js`` synchronously in the head of every
  page, which delays the first render, for search-as-you-type results the site
  does not use. ``page_weight_templates/layout.html`` leaves them out of every
  page but ``search.html``, where the search runs (the search field on every
  page submits to it). With the theme's ``search_as_you_type`` switched on, the
  template keeps them.

(MathJax, which Sphinx also added to pages without maths, is no longer loaded at all:
``static_math.py`` typesets the maths when the site is built.)

One thing every page loads that is mostly unused: the stylesheets. The
theme's stylesheet bundles all of Bootstrap (311 kB), sphinx-design's every
component; a page uses a small part of each. After the build, each stylesheet
matched by ``page_weight_purge_css`` loses the rules whose selectors name a
class that appears nowhere in the site: in no built page's ``class``
attributes, in no inline script, in no JavaScript file the site ships (so a
class that a script adds, such as Bootstrap's ``show``, stays). Rules that name
no class, ``@font-face`` and ``@keyframes`` rules are kept as they are.

One thing the code blocks carry that changes nothing on screen. Pygments wraps
every token of a code cell in a ``<span class="...">``; a name, a punctuation mark
or a space gets one too, though the site's Pygments style gives those classes
(``n``, ``p``, ``w`` and three rarer ones) exactly the code block's own text
colour, in both themes. Those spans were a fifth of a chapter page's HTML
(30-96 kB a chapter). After the build, :func:`plain_token_classes` reads the built ``pygments.css`` for the classes
whose only declaration, in every theme, is that colour, and
:func:`unwrap_plain_tokens` leaves their tokens as bare text inside the code
blocks (``div.highlight pre``), nowhere else.

Enabled in ``_config.yml``: ``page_weight: book/_ext`` under ``sphinx: local_extensions`` (puts
this folder on the path) and ``page_weight`` in ``sphinx: config: extensions`` (that list replaces
Jupyter Book's). The stylesheet purge needs ``tinycss2``. ``tests/test_page_weight.py`` checks the
built pages; ``scripts/check_site.py`` accepts the purged copy of the theme's trimmed stylesheet.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).resolve().parent / "page_weight_templates"


def _add_templates(app: Any, config: Any) -> None:
    """Put this extension's templates first, so its ``layout.html`` wraps the theme's."""
    path = str(TEMPLATES)
    if path not in config.templates_path:
        config.templates_path.insert(0, path)


# Stylesheets in _static to purge (glob patterns). The site's own course.css is not listed: all of it is used.
PURGE_CSS = ["styles/pydata-sphinx-theme.css", "sphinx-design.min.css", "mystnb.*.css"]
_CLASS = re.compile(r"\.(-?[_a-zA-Z][_a-zA-Z0-9-]*)")
# Parts of a selector whose classes need not be present for it to match: attribute values, :not(...) and the
# like (a rule for `.a:not(.b)` applies wherever `.a` does).
_IGNORED = re.compile(r"\[[^\]]*\]|:(?:not|is|where|has)\([^()]*(?:\([^()]*\)[^()]*)*\)")
_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


def site_tokens(outdir: Path) -> set[str]:
    """Every class name in the built pages' class attributes, and every word in their scripts and the site's JS."""
    tokens: set[str] = set()
    for page in outdir.rglob("*.html"):
        html = page.read_text(encoding="utf-8", errors="replace")
        for classes in re.findall(r'class="([^"]*)"', html):
            tokens.update(classes.split())
        for script in re.findall(r"<script\b[^>]*>(.*?)</script>", html, flags=re.S):
            tokens.update(_TOKEN.findall(script))
    for script in outdir.rglob("*.js"):
        tokens.update(_TOKEN.findall(script.read_text(encoding="utf-8", errors="replace")))
    return tokens


def selector_may_match(selector: str, tokens: set[str]) -> bool:
    """False only if ``selector`` needs a class that is not in ``tokens``."""
    return all(name in tokens for name in _CLASS.findall(_IGNORED.sub("", selector)))


def split_selectors(prelude: str) -> list[str]:
    """A rule's selector list split at its top-level commas (not those inside ``:not(a, b)`` or ``[x=","]``)."""
    selectors, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(prelude):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            selectors.append(prelude[start:i].strip())
            start = i + 1
    selectors.append(prelude[start:].strip())
    return [selector for selector in selectors if selector]


def purge_css(css: str, tokens: set[str]) -> str:
    """``css`` without the rules none of whose selectors may match; a rule keeps only its selectors that may."""
    import tinycss2  # imported here: only a full build needs it

    def rules(nodes: list) -> str:
        out = []
        for node in nodes:
            if node.type == "qualified-rule":
                selectors = split_selectors(tinycss2.serialize(node.prelude))
                kept = [sel for sel in selectors if selector_may_match(sel, tokens)]
                if kept:
                    out.append(",".join(kept) + "{" + tinycss2.serialize(node.content) + "}")
            elif node.type == "at-rule" and node.lower_at_keyword in ("media", "supports", "layer", "container"):
                if node.content is None:
                    out.append(tinycss2.serialize([node]))
                    continue
                inner = rules(tinycss2.parse_rule_list(node.content))
                if inner:
                    out.append("@" + node.at_keyword + tinycss2.serialize(node.prelude) + "{" + inner + "}")
            elif node.type != "whitespace":
                out.append(tinycss2.serialize([node]))  # @charset, @font-face, @keyframes, comments: as they are
        return "".join(out)

    return rules(tinycss2.parse_stylesheet(css))


def purge_stylesheets(app: Any, exception: Exception | None) -> None:
    """After a successful HTML build, purge the stylesheets named by ``page_weight_purge_css``."""
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    static = outdir / "_static"
    tokens = site_tokens(outdir)
    for pattern in app.config.page_weight_purge_css:
        matches = sorted(static.glob(pattern))
        if not matches:
            raise ValueError(
                f"page_weight_purge_css: expected a stylesheet in {static} matching {pattern!r}, found none"
            )
        for path in matches:
            before = path.read_text(encoding="utf-8")
            after = purge_css(before, tokens)
            path.write_text(after, encoding="utf-8")
            print(f"page_weight: {path.relative_to(outdir)}: {len(before):,} -> {len(after):,} bytes")


# pygments.css as Sphinx writes it for a theme with light and dark styles: one rule per line, each
# optionally scoped to a theme, e.g. `html[data-theme="dark"] .highlight .n { color: #F8F8F2 } /* Name */`.
_PYGMENTS_RULE = re.compile(r'^(html\[data-theme="(\w+)"\] )?\.highlight(?: \.([\w-]+))? \{([^{}]*)\}', re.M)


def _declarations(body: str) -> dict[str, str]:
    pairs = (part.split(":", 1) for part in body.split(";") if part.strip())
    return {name.strip().lower(): value.strip().lower() for name, value in pairs}


def plain_token_classes(pygments_css: str) -> set[str]:
    """The Pygments token classes styled, in every theme, with only the code block's own text colour."""
    if not isinstance(pygments_css, str):
        raise ValueError(f"plain_token_classes: expected pygments.css as a str, got {type(pygments_css).__name__}")
    base: dict[str | None, str] = {}
    tokens: dict[str, dict[str | None, dict[str, str]]] = {}
    for match in _PYGMENTS_RULE.finditer(pygments_css):
        theme, token, declarations = match.group(2), match.group(3), _declarations(match.group(4))
        if token is None:
            if "color" in declarations:
                base[theme] = declarations["color"]
        else:
            tokens.setdefault(token, {})[theme] = declarations
    if not base:
        return set()
    return {
        token
        for token, styles in tokens.items()
        if set(styles) <= set(base)
        and all(styles.get(theme, {"color": colour}) == {"color": colour} for theme, colour in base.items())
    }


_CODE_BLOCK = re.compile(r'(<div class="highlight[^"]*"><pre>)(.*?)(</pre>)', re.S)


def unwrap_plain_tokens(page: str, classes: set[str]) -> str:
    """``page`` with the spans of the ``classes`` tokens inside its code blocks replaced by their text."""
    if not isinstance(page, str) or not isinstance(classes, (set, frozenset)):
        raise ValueError(
            f"unwrap_plain_tokens: expected a page (str) and a set of classes, got "
            f"{type(page).__name__} and {type(classes).__name__}"
        )
    if not classes:
        return page
    names = "|".join(sorted(re.escape(name) for name in classes))
    span = re.compile(rf'<span class="(?:{names})">([^<]*)</span>')
    return _CODE_BLOCK.sub(lambda m: m.group(1) + span.sub(r"\1", m.group(2)) + m.group(3), page)


def unwrap_code_tokens(app: Any, exception: Exception | None) -> None:
    """After a successful HTML build, unwrap the plain tokens of every page's code blocks."""
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    css = outdir / "_static" / "pygments.css"
    if not css.is_file():
        return
    classes = plain_token_classes(css.read_text(encoding="utf-8"))
    saved = 0
    for path in sorted(outdir.rglob("*.html")):
        before = path.read_text(encoding="utf-8")
        after = unwrap_plain_tokens(before, classes)
        if after != before:
            path.write_text(after, encoding="utf-8")
            saved += len(before.encode()) - len(after.encode())
    print(f"page_weight: code tokens of classes {sorted(classes)} unwrapped, {saved:,} bytes saved")


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("page_weight_purge_css", PURGE_CSS, "html", types=[list])
    app.connect("config-inited", _add_templates)
    app.connect("build-finished", purge_stylesheets)
    app.connect("build-finished", unwrap_code_tokens, priority=600)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
