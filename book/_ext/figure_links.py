"""Let a reader open every figure full size: each image becomes a link to its own file.

On a phone the article is about 343 px wide, so a figure is shown scaled down;
a tap on it now opens the image file at its natural size, in the same tab
(the browser's back button returns to the page), where it can be zoomed.

Every image node of a page (a notebook's output images and ``{figure}`` or
``{image}`` images) that is not already inside a link is wrapped in a link to
the file Sphinx copies it to (``_images/...``). The link's accessible name is
the image's alt text, which every image must therefore have: an image without
one is reported as a warning (an error under ``-W``). The link says what it does
in its ``title``. Images already in a link (a ``:target:``) are left alone,
and so are remote images. Sphinx's own ``html_scaled_image_link`` then skips
these images, as they already have a link.

Register it in ``_config.yml``::

    sphinx:
      local_extensions:
        figure_links: book/_ext
"""

from __future__ import annotations

import posixpath
import urllib.parse
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.osutil import relative_uri

logger = logging.getLogger(__name__)

#: The class of every link this extension adds, for the site's CSS (a zoom-in cursor).
LINK_CLASS = "figure-link"
#: What a link says it does, as its title (a tooltip, and the description screen readers add).
LINK_TITLE = "Open the full-size image"


def image_file(builder: Any, docname: str, image: nodes.image) -> str | None:
    """The address, relative to ``docname``'s page, of the file the builder writes ``image`` to.

    None for a remote image or one whose file Sphinx does not know. The
    candidate is chosen as ``Builder.post_process_images`` chooses it: the
    image's own URI, or the first of the builder's supported types it offers.
    """
    candidates = image.get("candidates", {})
    if "?" in candidates:  # a remote image: no local file to open
        return None
    if "*" in candidates or not candidates:
        uri = image["uri"]
    else:
        uri = next((candidates[kind] for kind in builder.supported_image_types if kind in candidates), None)
    if uri is None or uri not in builder.env.images:
        return None
    folder = relative_uri(builder.get_target_uri(docname), builder.imagedir)
    return posixpath.join(folder, urllib.parse.quote(builder.env.images[uri][1]))


def _in_a_link(node: nodes.Node) -> bool:
    parent = node.parent
    while parent is not None:
        if isinstance(parent, nodes.reference):
            return True
        parent = parent.parent
    return False


def link_images(app: Sphinx, doctree: nodes.document, docname: str) -> int:
    """Wrap each image of ``doctree`` that is not in a link in a link to its file; return how many.

    Run on ``doctree-resolved``, for HTML builders only. Running it twice
    changes nothing more: a linked image is inside a link.
    """
    builder = app.builder
    if builder.format != "html" or not getattr(builder, "html_scaled_image_link", False):  # e.g. epub: no
        return 0
    wrapped = 0
    for image in list(doctree.findall(nodes.image)):
        if _in_a_link(image):
            continue
        target = image_file(builder, docname, image)
        if target is None:
            continue
        if not str(image.get("alt", "")).strip():
            logger.warning(
                "figure_links: image %s has no alt text, so the link that opens it would have no name; "
                "give it one (a notebook output: the cell's mystnb.image.alt metadata)",
                image["uri"],
                location=image,
                type="figure_links",
            )
        link = nodes.reference("", "", internal=True, refuri=target, reftitle=LINK_TITLE, classes=[LINK_CLASS])
        image.replace_self(link)
        link.append(image)
        wrapped += 1
    return wrapped


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("doctree-resolved", link_images)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
