"""Rebuild the Font Awesome subsets this site serves instead of the theme's full files.

Run from the repository root after `make site` whenever a page starts to use a new
fa-* icon or pydata-sphinx-theme is upgraded (scripts/check_site.py fails then):

    .venv/bin/python book/_static/fontawesome-subset/make_subset.py && make site

Writes, from the installed pydata-sphinx-theme:
- book/_static/fontawesome-subset/fa-solid-900.woff, fa-brands-400.woff: only the
  glyphs the built site shows (fontTools, a dependency of matplotlib);
- book/_static/styles/pydata-sphinx-theme.css: the theme's stylesheet without the
  ~1,900 ".fa-NAME:before{content:...}" rules of icons the site does not use (86 kB).
Sphinx copies html_static_path after the theme's static files, so both win.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))
from check_site import THEME_STATIC, icon_catalog_rule, icons_used, site_code_points  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    from fontTools import subset

    site = ROOT / "_build" / "html"
    classes = icons_used(site)
    css = (THEME_STATIC / "styles" / "pydata-sphinx-theme.css").read_text(encoding="utf-8")
    trimmed = re.sub(
        r"[^{}]+\{[^{}]*\}",
        lambda rule: "" if (names := icon_catalog_rule(rule.group(0))) and not names & classes else rule.group(0),
        css,
    )
    out = ROOT / "book" / "_static" / "styles" / "pydata-sphinx-theme.css"
    out.parent.mkdir(exist_ok=True)
    out.write_text(trimmed, encoding="utf-8")
    points = site_code_points(site, classes)
    for name in ("fa-solid-900", "fa-brands-400"):
        options = subset.Options()
        options.flavor = "woff"
        options.layout_features = ["*"]
        options.name_IDs = ["*"]
        font = subset.load_font(str(THEME_STATIC / "vendor" / "fontawesome" / "webfonts" / f"{name}.ttf"), options)
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=points)
        subsetter.subset(font)
        subset.save_font(font, str(HERE / f"{name}.woff"), options)
    print(f"{len(classes)} icon classes, {len(points)} code points; wrote {out.relative_to(ROOT)} and the subsets")


if __name__ == "__main__":
    main()
