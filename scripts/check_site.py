"""Check a built site: the expected pages exist and nothing loads from another host.

Usage: python scripts/check_site.py _build/html

Run by ``make book`` after the build. It checks that every page in _toc.yml was
built, then reads every HTML page and stylesheet
and fails (exit 1) on a script, stylesheet, image, font or frame whose address
names a host (``http://``, ``https://`` or ``//``). Plain links (``<a href>``)
to other sites are fine: they load nothing until a reader follows them.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

TOC = Path(__file__).resolve().parents[1] / "_toc.yml"


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
    for sheet in sorted(site.rglob("*.css")):
        if CSS_REMOTE.search(sheet.read_text(encoding="utf-8", errors="replace")):
            problems.append(f"{sheet.relative_to(site)}: a stylesheet imports from another host")
    return problems


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
