"""book/_ext/accessible_html.py: the bibliography's entries become list items, and nothing else changes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("accessible_html", ROOT / "book" / "_ext" / "accessible_html.py")
accessible_html = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accessible_html)
label_citations = accessible_html.label_citations

# What docutils 0.21 writes for two sphinxcontrib-bibtex entries (shortened).
BIBLIOGRAPHY = (
    '<div class="docutils container" id="id2">\n'
    '<div role="list" class="citation-list">\n'
    '<div class="citation" id="id30" role="doc-biblioentry">\n'
    '<span class="label"><span class="fn-bracket">[</span>AZ20<span class="fn-bracket">]</span></span>\n'
    '<p>Abnar and Zuidema. <a class="reference external" href="https://doi.org/10.1/x">doi</a>.</p>\n'
    "</div>\n"
    '<div class="citation" id="id7" role="doc-biblioentry">\n'
    '<span class="label"><span class="fn-bracket">[</span>BKH16<span class="fn-bracket">]</span></span>\n'
    "<p>Ba, Kiros and Hinton. Layer normalization.</p>\n"
    "</div>\n"
    "</div>\n"
    "</div>\n"
)


def test_each_entry_becomes_a_list_item_and_nothing_else_changes():
    fixed = label_citations(BIBLIOGRAPHY)
    assert fixed.count('role="listitem"') == 2
    assert "doc-biblioentry" not in fixed
    assert '<div role="list" class="citation-list">' in fixed
    assert '<div class="citation" id="id30" role="listitem">' in fixed
    assert fixed.replace('role="listitem"', 'role="doc-biblioentry"') == BIBLIOGRAPHY


def test_attribute_order_does_not_matter():
    body = BIBLIOGRAPHY.replace(
        'class="citation" id="id7" role="doc-biblioentry"', 'role="doc-biblioentry" id="id7" class="citation"'
    )
    fixed = label_citations(body)
    assert '<div role="listitem" id="id7" class="citation">' in fixed
    assert "doc-biblioentry" not in fixed


def test_it_is_idempotent():
    once = label_citations(BIBLIOGRAPHY)
    assert label_citations(once) == once


def test_a_page_without_citations_is_left_alone():
    body = '<p>See <a class="reference internal" href="bibliography.html#id30">Abnar and Zuidema</a>.</p>\n<div class="cell">x</div>'
    assert label_citations(body) == body
    assert label_citations("") == ""


def test_footnotes_are_left_alone():
    # docutils' footnotes are <aside class="footnote" role="doc-footnote">, which axe accepts.
    body = '<aside class="footnote-list brackets">\n<aside class="footnote brackets" id="f1" role="doc-footnote">x</aside>\n</aside>'
    assert label_citations(body) == body


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # The list lost its role: the entries would not be list items of anything.
        (
            BIBLIOGRAPHY.replace('<div role="list" class="citation-list">', '<div class="citation-list">'),
            "citation-list",
        ),
        # The entries sit in some other container.
        (BIBLIOGRAPHY.replace('<div role="list" class="citation-list">', '<dl class="citations">'), "citation-list"),
        # An entry with a role this function was not written for.
        (BIBLIOGRAPHY.replace('id="id7" role="doc-biblioentry"', 'id="id7" role="note"'), 'role="note"'),
        # An entry with no role at all.
        (BIBLIOGRAPHY.replace(' id="id7" role="doc-biblioentry"', ' id="id7"'), 'id="id7"'),
    ],
    ids=["list-without-role", "other-container", "other-role", "no-role"],
)
def test_unexpected_citation_markup_fails_loudly(body, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        label_citations(body)


def test_bad_input_names_what_was_expected():
    with pytest.raises(ValueError, match="expects the page body as a str, got bytes"):
        label_citations(BIBLIOGRAPHY.encode())


def test_the_logo_template_wraps_the_themes_own_in_a_labelled_landmark():
    template = (accessible_html.TEMPLATES / "navbar-logo.html").read_text()
    assert re.search(r'<nav\b[^>]*aria-label="[^"]+"', template), template
    assert '{% include "components/navbar-logo.html" %}' in template


# What pydata-sphinx-theme 0.17 writes in the sidebar for an entry with sub-pages (shortened).
name_toctree_toggles = accessible_html.name_toctree_toggles
SIDEBAR = (
    '<ul class="nav bd-sidenav">\n'
    '<li class="toctree-l1"><a class="reference internal" href="exercises.html">Exercises</a></li>\n'
    '<li class="toctree-l1 has-children"><a class="reference internal" href="api.html">API <code>reference</code> &amp; more</a>'
    '<details><summary><span class="toctree-toggle" role="presentation"><i class="fa-solid fa-chevron-down"></i></span>'
    '</summary><ul>\n<li class="toctree-l2"><a class="reference internal" href="api/masks.html">Masks</a></li>\n</ul></details></li>\n'
    "</ul>"
)


def test_each_expand_button_is_named_after_its_entry():
    named = name_toctree_toggles(SIDEBAR)
    assert named.count("<summary") == 1
    assert '<details><summary aria-label="Pages under API reference &amp; more">' in named
    assert named.replace(' aria-label="Pages under API reference &amp; more"', "") == SIDEBAR


def test_the_current_pages_entry_is_named_too():
    # On the API page itself the link is <a class="current reference internal" href="#">.
    current = SIDEBAR.replace(
        '<a class="reference internal" href="api.html">', '<a class="current reference internal" href="#">'
    )
    assert '<summary aria-label="Pages under API reference &amp; more">' in name_toctree_toggles(current)


def test_naming_is_idempotent_and_leaves_other_html_alone():
    once = name_toctree_toggles(SIDEBAR)
    assert name_toctree_toggles(once) == once
    plain = (
        '<ul class="nav bd-sidenav"><li class="toctree-l1"><a class="reference internal" href="x.html">X</a></li></ul>'
    )
    assert name_toctree_toggles(plain) == plain
    # A section caption inside the summary already names it.
    captioned = '<li class="has-children"><details><summary><p class="caption">Chapters</p><span class="toctree-toggle" role="presentation"></span></summary></details></li>'
    assert name_toctree_toggles(captioned) == captioned


@pytest.mark.parametrize(
    "sidebar",
    [
        # The chevron moved: the summary no longer follows the entry's link.
        SIDEBAR.replace(
            '<details><summary><span class="toctree-toggle"',
            '<details><span class="x"></span><summary><span class="toctree-toggle"',
        ),
        # The toggle's span changed its class.
        SIDEBAR.replace('class="toctree-toggle"', 'class="nav-toggle"'),
    ],
    ids=["summary-moved", "toggle-renamed"],
)
def test_unexpected_sidebar_markup_fails_loudly(sidebar):
    with pytest.raises(ValueError, match="expected every expand button of the sidebar to follow an entry's link"):
        name_toctree_toggles(sidebar)


def test_bad_sidebar_input_names_what_was_expected():
    with pytest.raises(ValueError, match="expects the table of contents as a str, got NoneType"):
        name_toctree_toggles(None)
