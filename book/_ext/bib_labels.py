"""Label each bibliography entry as the chapters cite it: "Dosovitskiy et al., 2021".

The chapters cite author-year (``bibtex_reference_style: author_year``), but sphinxcontrib-bibtex's
default entry style labels the bibliography alphabetically, with labels such as ``[ALTdJ+23]`` that
appear nowhere in the text: a reader who follows "[Ainslie et al., 2023]" lands on an entry labelled
something else. This extension registers a pybtex style, ``course_author_year``: pybtex's ``plain``
entries, each labelled by the same template that writes the in-text citation (sphinxcontrib-bibtex's
author-or-editor-or-title, ", ", year), and listed in the alphabetical order of those labels (pybtex's
own author sort put "Llama Team, AI @ Meta", whose name is one braced word, after "Zhang").
``_config.yml`` selects it with ``bibtex_default_style``.

Two entries whose author and year agree would get one label, and their citations one text. As in
APA style, ``book/references.bib`` gives them year suffixes ("2023a", "n.d.-b"); a build with two
equal labels stops and names them. ``tests/test_bib_labels.py`` checks the labels and that every
citation's text equals its entry's label.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle
from sphinxcontrib.bibtex.style.referencing import PersonStyle
from sphinxcontrib.bibtex.style.template import join, year

STYLE = "course_author_year"


def author_year(entry: Any) -> str:
    """The text an author-year citation of ``entry`` shows: ``"Kingma and Ba, 2015"``."""
    if not hasattr(entry, "persons") or not hasattr(entry, "fields"):
        raise ValueError(f"author_year: expected a pybtex Entry, got {type(entry).__name__}")
    person = PersonStyle()
    template = join(sep=", ")[person.author_or_editor_or_title(full=False), year]
    return template.format_data({"entry": entry, "style": SimpleNamespace(person=person)}).render_as("text")


class AuthorYearLabelStyle(BaseLabelStyle):
    """pybtex labels that read as the chapters' citations; two equal labels are an error."""

    def format_labels(self, sorted_entries: Any) -> Any:
        entries = list(sorted_entries)
        labels = [author_year(entry) for entry in entries]
        repeated = sorted(label for label, count in Counter(labels).items() if count > 1)
        if repeated:
            keys = {
                label: [e.key for e, lab in zip(entries, labels, strict=True) if lab == label] for label in repeated
            }
            raise ValueError(
                f"bib_labels: expected one bibliography entry per author-year label, got several for {keys}; "
                "give them year suffixes in book/references.bib (2023a, 2023b), as APA style does"
            )
        return iter(labels)


class AuthorYearSortingStyle(BaseSortingStyle):
    """Entries in the alphabetical order of their author-year labels (case aside), then by title."""

    def sorting_key(self, entry: Any) -> tuple[str, str]:
        return author_year(entry).casefold(), entry.fields.get("title", "").casefold()


class AuthorYearStyle(PlainStyle):
    """pybtex's plain style, labelled author-year and sorted by those labels."""

    default_label_style = STYLE
    default_sorting_style = STYLE


def setup(app: Any) -> dict[str, Any]:
    register_plugin("pybtex.style.labels", STYLE, AuthorYearLabelStyle, force=True)
    register_plugin("pybtex.style.sorting", STYLE, AuthorYearSortingStyle, force=True)
    register_plugin("pybtex.style.formatting", STYLE, AuthorYearStyle, force=True)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
