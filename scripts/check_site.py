"""Check a built site: the expected pages exist and nothing loads from another host.

Usage: python scripts/check_site.py _build/html

Run by ``make book`` after the build. It checks that every page in _toc.yml was
built, then reads every HTML page and stylesheet
and fails (exit 1) on a script, stylesheet, image, font or frame whose address
names a host (``http://``, ``https://`` or ``//``), and on MyST markup that
reached a page's text unrendered (a ```` ```{dropdown} ```` fence whose title
holds backticks is printed as plain text, for example). Plain links (``<a href>``)
to other sites are fine: they load nothing until a reader follows them.

The site serves cut-down Font Awesome files (book/_static/fontawesome-subset/,
for page weight). If the built site has them, it also fails when a page uses an
``fa-*`` icon whose glyph the subset fonts lack, or when the trimmed copy of the
theme's stylesheet no longer matches the installed pydata-sphinx-theme; running
book/_static/fontawesome-subset/make_subset.py rebuilds both.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

TOC = Path(__file__).resolve().parents[1] / "_toc.yml"
SUBSET_HINT = "run .venv/bin/python book/_static/fontawesome-subset/make_subset.py, then make site"


def _theme_static() -> Path | None:
    try:
        import pydata_sphinx_theme
    except ImportError:
        return None
    return Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static"


THEME_STATIC = _theme_static()
_RULE = re.compile(r"[^{}]+\{[^{}]*\}")
_CATALOG_RULE = re.compile(r"^\s*((?:\.fa-[a-z0-9-]+:+(?:before|after)\s*,?\s*)+)\{content:[^{}]*\}$")
_PRIVATE_USE = re.compile(r"[\ue000-\uf8ff]|\\[ef][0-9a-f]{3}\b")


def icon_catalog_rule(rule: str) -> set[str]:
    """The icon names if ``rule`` is one of Font Awesome's ``.fa-NAME:before{content:...}`` rules, else none."""
    match = _CATALOG_RULE.match(rule)
    return set(re.findall(r"\.(fa-[a-z0-9-]+)", match.group(1))) if match else set()


def icons_used(site: Path) -> set[str]:
    """Every ``fa-*`` class named in the site's pages and scripts (MathJax and the emptied fontawesome.js aside)."""
    files = list(site.rglob("*.html")) + [p for p in (site / "_static").rglob("*.js") if "mathjax" not in p.parts]
    used: set[str] = set()
    for path in files:
        if path.name != "fontawesome.js":
            used |= set(re.findall(r"fa-[a-z0-9-]+", path.read_text(encoding="utf-8", errors="replace")))
    return used


def trimmed_theme_css(classes: set[str]) -> str:
    """pydata-sphinx-theme's stylesheet without the catalog rules of icons not in ``classes``."""
    css = (THEME_STATIC / "styles" / "pydata-sphinx-theme.css").read_text(encoding="utf-8")
    return _RULE.sub(lambda m: "" if (n := icon_catalog_rule(m.group(0))) and not n & classes else m.group(0), css)


def trimmed_theme_css_served(site: Path, classes: set[str]) -> tuple[str, ...]:
    """The trimmed stylesheet as the site may serve it: as trimmed, or after book/_ext/page_weight.py's purge."""
    trimmed = trimmed_theme_css(classes)
    try:
        sys.path.insert(0, str(TOC.parent / "book" / "_ext"))
        import page_weight
    except ImportError:
        return (trimmed,)
    finally:
        sys.path.pop(0)
    return trimmed, page_weight.purge_css(trimmed, page_weight.site_tokens(site))


def site_code_points(site: Path, classes: set[str]) -> set[int]:
    """The private-use code points (icons) that the site's stylesheets can show, given the classes used."""
    sheets = [(THEME_STATIC / "styles" / "pydata-sphinx-theme.css").read_text(encoding="utf-8")]
    sheets += [
        p.read_text(encoding="utf-8", errors="replace")
        for p in (site / "_static").rglob("*.css")
        if p.name != "pydata-sphinx-theme.css"
    ]
    points: set[int] = set()
    for css in sheets:
        for rule in _RULE.findall(re.sub(r"/\*.*?\*/", "", css, flags=re.S)):
            names = icon_catalog_rule(rule)
            if names and not names & classes:
                continue
            body = rule[rule.index("{") :]
            points |= {ord(c) if len(c) == 1 else int(c[1:], 16) for c in _PRIVATE_USE.findall(body)}
    return points


def icon_problems(site: Path) -> list[str]:
    """Icons the Font Awesome subsets lack, and a stale trimmed theme stylesheet."""
    subsets = sorted((site / "_static" / "fontawesome-subset").glob("*.woff"))
    if not subsets or THEME_STATIC is None:
        return []
    from fontTools.ttLib import TTFont

    classes = icons_used(site)
    problems = []
    served = site / "_static" / "styles" / "pydata-sphinx-theme.css"
    if served.is_file() and served.read_text(encoding="utf-8") not in trimmed_theme_css_served(site, classes):
        problems.append(f"_static/styles/pydata-sphinx-theme.css is not the installed theme's, trimmed; {SUBSET_HINT}")
    wanted = site_code_points(site, classes)
    for subset in subsets:
        full = THEME_STATIC / "vendor" / "fontawesome" / "webfonts" / f"{subset.stem}.ttf"
        in_full = set(TTFont(full).getBestCmap()) & wanted
        missing = in_full - set(TTFont(subset).getBestCmap())
        if missing:
            codes = " ".join(f"U+{c:04X}" for c in sorted(missing))
            problems.append(f"{subset.relative_to(site)} lacks icons the site shows ({codes}); {SUBSET_HINT}")
    return problems


def expected_pages() -> list[str]:
    """index.html plus one page per file named in _toc.yml (root and every chapter)."""
    files = re.findall(r"^\s*(?:-\s*)?(?:root|file):\s*(\S+)", TOC.read_text(), re.MULTILINE)
    return ["index.html"] + [f"{name}.html" for name in files]


# Tags and the attribute through which they make the browser fetch something.
LOADING_ATTRIBUTES = {
    "script": "src",
    "img": "src",
    "iframe": "src",
    "source": "src",
    "video": "src",
    "audio": "src",
    "embed": "src",
    "link": "href",  # stylesheets, icons, preloads; rel is checked below
}
# <link rel=...> values that fetch the target when the page loads.
LOADING_LINK_RELS = {"stylesheet", "preload", "modulepreload", "icon", "shortcut", "apple-touch-icon", "manifest"}
REMOTE = re.compile(r"^\s*(https?:)?//", re.IGNORECASE)
CSS_REMOTE = re.compile(r"(url\(\s*['\"]?\s*(https?:)?//|@import\s+['\"](https?:)?//)", re.IGNORECASE)


# MyST that should have become HTML: a directive fence or a role, seen in a page's text outside code.
UNRENDERED_MYST = re.compile(r"(```|:::)\{[a-z-]+\}|\{(ref|eq|cite:p|cite:t|glue:text|py:func|py:class|numref)\}`")


class _VisibleText(HTMLParser):
    """A page's text outside <pre>, <code>, <script> and <style>, where MyST source may legitimately appear."""

    SKIP = {"pre", "code", "script", "style"}

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.depth += tag in self.SKIP

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag in self.SKIP and self.depth > 0

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.parts.append(data)


def unrendered_myst(html: str) -> list[str]:
    """The MyST fences and roles in ``html``'s visible text, which the build left unrendered."""
    parser = _VisibleText()
    parser.feed(html)
    return [match.group(0) for match in UNRENDERED_MYST.finditer(" ".join(parser.parts))]


class _RemoteLoads(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attribute = LOADING_ATTRIBUTES.get(tag)
        if attribute is None:
            return
        values = dict(attrs)
        if tag == "link":
            rels = set((values.get("rel") or "").lower().split())
            if not rels & LOADING_LINK_RELS:
                return
        url = values.get(attribute) or ""
        if REMOTE.match(url):
            self.found.append(f"<{tag} {attribute}={url!r}>")


def problems_in(site: Path) -> list[str]:
    """Return a description of every problem found in the built ``site``."""
    problems = [f"missing page {page}" for page in expected_pages() if not (site / page).is_file()]
    for page in sorted(site.rglob("*.html")):
        parser = _RemoteLoads()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        problems += [f"{page.relative_to(site)}: loads from another host: {tag}" for tag in parser.found]
        html = page.read_text(encoding="utf-8", errors="replace")
        problems += [f"{page.relative_to(site)}: unrendered MyST in the text: {m!r}" for m in unrendered_myst(html)]
    for sheet in sorted(site.rglob("*.css")):
        if CSS_REMOTE.search(sheet.read_text(encoding="utf-8", errors="replace")):
            problems.append(f"{sheet.relative_to(site)}: a stylesheet imports from another host")
    return problems + icon_problems(site)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    site = Path(argv[0])
    problems = problems_in(site)
    for problem in problems:
        print(problem)
    pages = len(list(site.rglob("*.html")))
    if problems:
        print(f"check_site: {len(problems)} problem(s) in {pages} pages")
        return 1
    print(f"check_site: {pages} pages, all expected pages present, nothing loaded from another host")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
