"""Repair three pieces of the themes' HTML that axe-core reports (issue 32).

1. **The bibliography's entries.** docutils writes the citations that sphinxcontrib-bibtex makes as
   ``<div role="list" class="citation-list">`` holding ``<div class="citation" role="doc-biblioentry">``
   entries. ARIA 1.3 deprecates ``doc-biblioentry`` and does not allow it on a ``div``, so axe ignores
   it and reads the entries' links as direct children of the list: a critical ``aria-required-children``
   violation, and two minor ones per entry (``aria-allowed-role``, ``aria-deprecated-role``). Each entry
   becomes a plain ``role="listitem"``, which is what ARIA 1.3 recommends in its place.
   :func:`label_citations` does it to every page's body when the page is written, and raises if a page
   holds citations in any other markup, so that a docutils or theme upgrade cannot silently bring the
   violation back.
2. **The sidebar's logo.** sphinx-book-theme puts the logo link at the top of the left sidebar, outside
   every landmark (axe's ``region`` rule, on every page). book/_templates/navbar-logo.html wraps the
   theme's own logo template in a ``<nav>`` labelled "Course home"; this extension puts that folder first
   on Sphinx's template path so that it replaces the theme's file of the same name.
3. **The sidebar's expand buttons.** pydata-sphinx-theme gives a sidebar entry that has sub-pages (the API
   reference) a ``<details>`` whose ``<summary>`` holds only a decorative chevron, so the button has no name
   (axe's ``summary-name``, serious, on every page). :func:`name_toctree_toggles` labels each such
   ``<summary>`` "Pages under" and the entry's title; this extension applies it to the theme's
   ``generate_toctree_html``, which the sidebar template calls. It raises if the markup differs.

tests/test_site_a11y.py runs axe-core on every page in both colour themes; tests/test_accessible_html.py
tests :func:`label_citations` and :func:`name_toctree_toggles`.
"""

from __future__ import annotations

import functools
import re
from html import escape, unescape
from pathlib import Path

from markupsafe import Markup

TEMPLATES = Path(__file__).resolve().parents[1] / "_templates"

# The opening tag of a citation entry, in any attribute order.
_ENTRY = re.compile(r"<(?:div|aside)\b(?=[^>]*\bclass=\"citation\")[^>]*>")
_LIST = re.compile(r"<(?:div|aside)\b(?=[^>]*\bclass=\"citation-list\")[^>]*>")
_OLD_ROLE = 'role="doc-biblioentry"'
_NEW_ROLE = 'role="listitem"'


def label_citations(html: str) -> str:
    """``html`` with each citation entry's ``role="doc-biblioentry"`` replaced by ``role="listitem"``.

    Idempotent. A body without citations comes back unchanged. Raises ValueError if the body holds
    citation entries outside a ``role="list"`` container, or an entry with neither role: markup this
    function was not written for.
    """
    if not isinstance(html, str):
        raise ValueError(f"label_citations expects the page body as a str, got {type(html).__name__}")
    entries = _ENTRY.findall(html)
    if not entries:
        return html
    lists = _LIST.findall(html)
    if not lists or not all('role="list"' in tag for tag in lists):
        raise ValueError(
            f'expected the citations inside <div role="list" class="citation-list">, found list tags {lists} '
            f"around {len(entries)} entries such as {entries[0]}: the citation markup changed, see "
            "book/_ext/accessible_html.py"
        )
    unknown = [tag for tag in entries if _OLD_ROLE not in tag and _NEW_ROLE not in tag]
    if unknown:
        raise ValueError(
            f"expected each citation entry to carry {_OLD_ROLE} (or {_NEW_ROLE}), found {unknown[0]}: "
            "the citation markup changed, see book/_ext/accessible_html.py"
        )
    return _ENTRY.sub(lambda match: match.group(0).replace(_OLD_ROLE, _NEW_ROLE), html)


# A sidebar entry with sub-pages, as pydata-sphinx-theme 0.17 writes it: the link, then the disclosure widget.
_TOGGLE = re.compile(
    r'(<a class="[^"]*\breference\b[^"]*"[^>]*>(?P<title>(?:(?!</a>).)*)</a>\s*<details\b[^>]*>\s*)<summary>'
    r'(?=\s*<span class="toctree-toggle" role="presentation">)',
    re.S,
)
_SUMMARY = re.compile(r"<summary\b[^>]*>")


def name_toctree_toggles(html: str) -> str:
    """``html`` (the sidebar's table of contents) with each unnamed expand button named after its entry.

    ``<summary>`` becomes ``<summary aria-label="Pages under TITLE">``. Idempotent. Raises ValueError if an
    unnamed ``<summary>`` (no text, no aria-label) is left that does not follow an entry's link.
    """
    if not isinstance(html, str):
        raise ValueError(f"name_toctree_toggles expects the table of contents as a str, got {type(html).__name__}")

    def label(match: re.Match[str]) -> str:
        title = " ".join(unescape(re.sub(r"<[^>]+>", "", match.group("title"))).split())
        if not title:
            raise ValueError(f"expected a title in the sidebar link before an expand button, found {match.group(0)!r}")
        return f'{match.group(1)}<summary aria-label="{escape("Pages under " + title)}">'

    named = _TOGGLE.sub(label, html)
    for found in _SUMMARY.finditer(named):
        rest = named[found.end() :]
        text = re.sub(r"<[^>]+>", "", rest[: rest.find("</summary>")]).strip()
        if "aria-label=" not in found.group(0) and not text:
            raise ValueError(
                "expected every expand button of the sidebar to follow an entry's link, found an unnamed "
                f"{named[found.start() : found.end() + 120]!r}: the theme's markup changed, see "
                "book/_ext/accessible_html.py"
            )
    return named


def _page_context(app, pagename, templatename, context, doctree) -> None:
    from sphinx.errors import ExtensionError

    if "body" in context:
        try:
            context["body"] = label_citations(context["body"])
        except ValueError as error:
            raise ExtensionError(f"accessible_html, page {pagename}: {error}") from error
    toctree = context.get("generate_toctree_html")
    if toctree is None:
        raise ExtensionError(
            f"accessible_html, page {pagename}: expected pydata-sphinx-theme's generate_toctree_html in the "
            "page context, found none: the theme changed, see book/_ext/accessible_html.py"
        )
    if not getattr(toctree, "names_toggles", False):

        @functools.wraps(toctree)
        def named_toctree(*args, **kwargs):
            try:
                return Markup(name_toctree_toggles(str(toctree(*args, **kwargs))))
            except ValueError as error:
                raise ExtensionError(f"accessible_html, page {pagename}: {error}") from error

        named_toctree.names_toggles = True
        context["generate_toctree_html"] = named_toctree


def _use_templates(app, config) -> None:
    if not (TEMPLATES / "navbar-logo.html").is_file():
        from sphinx.errors import ExtensionError

        raise ExtensionError(f"accessible_html: expected {TEMPLATES / 'navbar-logo.html'}, found no such file")
    config.templates_path.insert(0, str(TEMPLATES))


def setup(app):
    app.connect("config-inited", _use_templates)
    # After pydata-sphinx-theme's own handler (priority 500), which puts generate_toctree_html in the context.
    app.connect("html-page-context", _page_context, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
