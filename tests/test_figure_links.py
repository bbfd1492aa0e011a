"""book/_ext/figure_links.py: every image on a page opens its own file when tapped.

Builds a small Sphinx project (reStructuredText, no notebooks) with the
extension, and reads the HTML it writes.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from docutils import nodes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import figure_links  # noqa: E402

PNG = (  # a 1 x 1 white PNG
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde\x00\x00"
    b"\x00\x0cIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7V\x9d\xd4\x00\x00\x00\x00IEND\xaeB`\x82"
)

PAGE = """\
Figures
=======

.. image:: pics/plot.png
   :alt: A plot

.. figure:: pics/diagram.png
   :alt: A diagram

   Its caption.

.. image:: pics/linked.png
   :alt: Already a link
   :target: https://example.org/

.. image:: pics/scaled.png
   :alt: Scaled down
   :width: 50%
"""


def _build(tmp_path: Path, page: str = PAGE, builder: str = "html") -> tuple[Path, str]:
    from sphinx.application import Sphinx

    source = tmp_path / "source"
    (source / "pics").mkdir(parents=True)
    (source / "sub").mkdir()
    for name in ("plot", "diagram", "linked", "scaled", "bare"):
        (source / "pics" / f"{name}.png").write_bytes(PNG)
    (source / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\nextensions = ['figure_links']\n"
    )
    (source / "index.rst").write_text(page + "\n.. toctree::\n\n   sub/deeper\n")
    (source / "sub" / "deeper.rst").write_text("Deeper\n======\n\n.. image:: ../pics/plot.png\n   :alt: Again\n")
    out = tmp_path / "out"
    warnings = io.StringIO()
    app = Sphinx(str(source), str(source), str(out), str(tmp_path / "doctrees"), builder, status=None, warning=warnings)
    app.build()
    return out, warnings.getvalue()


def _links(html: str) -> list[tuple[str, str]]:
    """(the <a> start tag, the <img> tag) for every image inside a link."""
    return re.findall(r"(<a [^>]*>)\s*(<img [^>]*>)", html)


def test_every_image_links_to_its_own_file_in_the_same_tab(tmp_path):
    out, warnings = _build(tmp_path)
    assert "figure_links" not in warnings, warnings
    html = (out / "index.html").read_text()
    links = {re.search(r'alt="([^"]*)"', img).group(1): a for a, img in _links(html)}
    assert set(links) == {"A plot", "A diagram", "Already a link", "Scaled down"}
    for alt, name in (("A plot", "plot.png"), ("A diagram", "diagram.png")):
        tag = links[alt]
        assert f'href="_images/{name}"' in tag and (out / "_images" / name).is_file()
        assert re.search(rf'class="[^"]*\b{figure_links.LINK_CLASS}\b[^"]*"', tag)
        assert f'title="{figure_links.LINK_TITLE}"' in tag
        assert "target=" not in tag  # the same tab: back returns to the page
    assert 'href="https://example.org/"' in links["Already a link"]  # a :target: is kept, not wrapped again
    assert figure_links.LINK_CLASS not in links["Already a link"]
    assert html.count(f"{figure_links.LINK_CLASS}") == 3  # plot, diagram, scaled; each wrapped once
    assert html.count("<img ") == len(_links(html))  # no image left without a link
    deeper = (out / "sub" / "deeper.html").read_text()
    assert 'href="../_images/plot.png"' in _links(deeper)[0][0]  # relative to the page's folder


def test_an_image_without_alt_text_is_reported(tmp_path):
    _, warnings = _build(tmp_path, PAGE + "\n.. image:: pics/bare.png\n")
    assert "figure_links: image pics/bare.png has no alt text" in warnings


class _Builder:
    format = "html"
    html_scaled_image_link = True
    supported_image_types = ["image/svg+xml", "image/png"]
    imagedir = "_images"

    def __init__(self, images):
        self.env = type("Env", (), {"images": images})()

    def get_target_uri(self, docname):
        return f"{docname}.html"


class _App:
    def __init__(self, builder):
        self.builder = builder


def _doctree(*images: nodes.image) -> nodes.document:
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    document = new_document("test", get_default_settings(Parser))
    for image in images:
        document += nodes.paragraph("", "", image)
    return document


def test_linking_twice_changes_nothing_and_picks_the_builders_candidate():
    images = {"a.png": ({"doc"}, "a.png"), "b.svg": ({"doc"}, "b1.svg")}
    app = _App(_Builder(images))
    plain = nodes.image(uri="a.png", alt="A", candidates={"*": "a.png"})
    choice = nodes.image(uri="b.*", alt="B", candidates={"image/png": "b.png", "image/svg+xml": "b.svg"})
    remote = nodes.image(uri="https://example.org/c.png", alt="C", candidates={"?": "https://example.org/c.png"})
    unknown = nodes.image(uri="gone.png", alt="D", candidates={"*": "gone.png"})
    doctree = _doctree(plain, choice, remote, unknown)
    assert figure_links.link_images(app, doctree, "chapters/one") == 2
    first = doctree.pformat()
    assert figure_links.link_images(app, doctree, "chapters/one") == 0
    assert doctree.pformat() == first
    assert plain.parent["refuri"] == "../_images/a.png"
    assert choice.parent["refuri"] == "../_images/b1.svg"  # the first supported type the image offers
    assert not isinstance(remote.parent, nodes.reference) and not isinstance(unknown.parent, nodes.reference)


def test_only_html_builders_get_links():
    builder = _Builder({"a.png": ({"doc"}, "a.png")})
    builder.html_scaled_image_link = False  # as Sphinx's epub builder sets it
    image = nodes.image(uri="a.png", alt="A", candidates={"*": "a.png"})
    assert figure_links.link_images(_App(builder), _doctree(image), "index") == 0
    builder.html_scaled_image_link, builder.format = True, "latex"
    assert figure_links.link_images(_App(builder), _doctree(image), "index") == 0
    builder.format = "html"
    assert figure_links.link_images(_App(builder), _doctree(image), "index") == 1


@pytest.mark.parametrize("quoted", [("my plot.png", "my%20plot.png")])
def test_file_names_are_quoted(quoted):
    name, expected = quoted
    app = _App(_Builder({name: ({"doc"}, name)}))
    image = nodes.image(uri=name, alt="A", candidates={"*": name})
    figure_links.link_images(app, _doctree(image), "index")
    assert image.parent["refuri"] == f"_images/{expected}"
