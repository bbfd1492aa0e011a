"""book/_ext/bib_labels.py: bibliography labels that read as the chapters' author-year citations.

The unit tests read book/references.bib with pybtex; the checks of the built site read _build/html
(SITE_HTML to check another build) and are skipped without one, except under CI=true, where they fail.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
from pathlib import Path

import pytest
from pybtex.database import Entry, Person, parse_file

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("SITE_HTML", ROOT / "_build" / "html"))
_spec = importlib.util.spec_from_file_location("bib_labels", ROOT / "book" / "_ext" / "bib_labels.py")
bib_labels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bib_labels)


def _entry(key: str, authors: list[str], year: str | None = None) -> Entry:
    entry = Entry("article", fields={"title": key} | ({"year": year} if year else {}))
    entry.key = key
    entry.persons["author"] = [Person(name) for name in authors]
    return entry


def test_author_year_reads_as_a_citation():
    assert bib_labels.author_year(_entry("a", ["Kingma, Diederik P."], "2015")) == "Kingma, 2015"
    assert bib_labels.author_year(_entry("b", ["Kingma, D.", "Ba, J."], "2015")) == "Kingma and Ba, 2015"
    assert bib_labels.author_year(_entry("c", ["A, B.", "C, D.", "E, F."], "2017")) == "A et al., 2017"
    assert bib_labels.author_year(_entry("d", ["{Unattributed notebook}"])) == "Unattributed notebook, n.d."
    with pytest.raises(ValueError, match="expected a pybtex Entry, got str"):
        bib_labels.author_year("kingma2015adam")


def test_two_entries_with_one_label_stop_the_build_and_are_named():
    style = bib_labels.AuthorYearLabelStyle()
    one, two = _entry("chen_a", ["Chen, S."], "2023"), _entry("chen_b", ["Chen, C."], "2023")
    with pytest.raises(ValueError, match=r"several for \{'Chen, 2023': \['chen_a', 'chen_b'\]\}.*2023a, 2023b"):
        list(style.format_labels([one, two]))
    assert list(style.format_labels([one, _entry("chen_c", ["Chen, C."], "2023b")])) == ["Chen, 2023", "Chen, 2023b"]


def test_the_course_bibliography_has_one_label_per_entry_in_alphabetical_order():
    entries = list(parse_file(ROOT / "book" / "references.bib").entries.values())
    labels = list(bib_labels.AuthorYearLabelStyle().format_labels(entries))
    assert len(set(labels)) == len(entries) > 60
    ordered = bib_labels.AuthorYearSortingStyle().sort(entries)
    assert [bib_labels.author_year(e).casefold() for e in ordered] == sorted(label.casefold() for label in labels)


def test_every_citation_in_the_site_shows_its_entrys_label():
    if not (SITE / "book" / "bibliography.html").is_file():
        message = f"no built site in {SITE}: run `make site` first"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    page = (SITE / "book" / "bibliography.html").read_text(encoding="utf-8")
    label_of = {
        anchor: html.unescape(label)
        for anchor, label in re.findall(
            r'<div class="citation" id="(\w+)"[^>]*>\s*<span class="label"><span class="fn-bracket">\[</span>'
            r"(.*?)<span",
            page,
        )
    }
    assert len(label_of) > 60 and not any(re.fullmatch(r"[A-Za-z]+\+?\d\d", label) for label in label_of.values())
    citations = 0
    for path in sorted(SITE.rglob("*.html")):
        text = path.read_text(encoding="utf-8")
        for anchor, shown in re.findall(r'href="[^"]*bibliography\.html#(\w+)"[^>]*>(.*?)</a>', text):
            if anchor in label_of:
                citations += 1
                # The citation joins "Ben Allal" with a no-break space; the label with a space.
                shown = html.unescape(re.sub(r"<[^>]+>", "", shown)).replace("\xa0", " ")
                assert shown == label_of[anchor], (
                    f"{path.relative_to(SITE)}: cites {shown!r}, entry reads {label_of[anchor]!r}"
                )
    assert citations > 50, citations
