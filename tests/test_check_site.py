"""scripts/check_site.py flags remote loads and missing pages, and passes plain links."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_site", ROOT / "scripts" / "check_site.py")
check_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_site)


def _site(tmp_path: Path, body: str, css: str = "") -> Path:
    for page in check_site.expected_pages():
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("<html><body>ok</body></html>")
    (tmp_path / "index.html").write_text(f"<html><head></head><body>{body}</body></html>")
    (tmp_path / "_static").mkdir(exist_ok=True)
    (tmp_path / "_static" / "theme.css").write_text(css)
    return tmp_path


def test_a_clean_site_passes_and_links_to_other_sites_are_fine(tmp_path):
    site = _site(
        tmp_path,
        '<a href="https://doi.org/10.1/x">paper</a><script src="_static/a.js"></script>'
        '<link rel="canonical" href="https://example.org/">',
    )
    assert check_site.problems_in(site) == []


def test_remote_scripts_stylesheets_images_and_css_imports_are_flagged(tmp_path):
    site = _site(
        tmp_path,
        '<script src="https://cdn.example.com/x.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.com/f.css">'
        '<img src="http://example.com/i.png" alt="i">',
        css="@import 'https://fonts.example.com/css';",
    )
    problems = check_site.problems_in(site)
    assert len(problems) == 4, problems
    assert any("<script src=" in p for p in problems) and any("stylesheet imports" in p for p in problems)


def test_every_toc_page_is_expected_and_a_missing_one_is_reported(tmp_path):
    pages = check_site.expected_pages()
    assert "chapters/01_word_vectors.html" in pages and "book/intro.html" in pages
    site = _site(tmp_path, "")
    (site / pages[-1]).unlink()
    assert check_site.problems_in(site) == [f"missing page {pages[-1]}"]


def _icon_site(tmp_path: Path, icon: str) -> Path:
    site = _site(tmp_path, f'<i class="fa-solid {icon}"></i>')
    (site / "_static" / "fontawesome-subset").mkdir()
    for font in (ROOT / "book" / "_static" / "fontawesome-subset").glob("*.woff"):
        (site / "_static" / "fontawesome-subset" / font.name).write_bytes(font.read_bytes())
    return site


def test_an_icon_missing_from_the_font_awesome_subset_is_flagged(tmp_path):
    if check_site.THEME_STATIC is None:
        import pytest

        pytest.skip("pydata-sphinx-theme is not installed")
    assert check_site.problems_in(_icon_site(tmp_path / "ok", "fa-rocket")) == []
    problems = check_site.problems_in(_icon_site(tmp_path / "car", "fa-car"))
    assert len(problems) == 1 and "fa-solid-900.woff lacks icons" in problems[0] and "U+F1B9" in problems[0]


def test_unrendered_myst_in_a_pages_text_is_flagged_but_not_inside_code(tmp_path):
    site = _site(
        tmp_path,
        "<p>```{dropdown} Going deeper: the three code paths</p><p>see {ref}`ch-batched`</p>"
        "<pre>```{dropdown} shown as source on purpose</pre><code>{ref}`x`</code>",
    )
    problems = check_site.problems_in(site)
    assert problems == [
        "index.html: unrendered MyST in the text: '```{dropdown}'",
        "index.html: unrendered MyST in the text: '{ref}`'",
    ]


_spec_opt = importlib.util.spec_from_file_location("optimize_images", ROOT / "scripts" / "optimize_images.py")
optimize_images = importlib.util.module_from_spec(_spec_opt)
_spec_opt.loader.exec_module(optimize_images)


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def test_optimize_images_drops_an_opaque_alpha_channel_and_keeps_every_pixel():
    rng = np.random.default_rng(0)
    opaque = np.dstack([rng.integers(0, 4, (64, 64, 3), dtype=np.uint8) * 60, np.full((64, 64), 255, np.uint8)])
    data = _png(opaque)
    smaller = optimize_images.optimized(data)
    assert len(smaller) < len(data)
    decoded = Image.open(io.BytesIO(smaller))
    assert decoded.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(decoded.convert("RGBA")), opaque)
    assert optimize_images.optimized(smaller) is smaller  # a second pass changes nothing


def test_optimize_images_keeps_a_translucent_alpha_channel():
    translucent = np.zeros((16, 16, 4), np.uint8)
    translucent[..., 3] = 128
    result = Image.open(io.BytesIO(optimize_images.optimized(_png(translucent))))
    assert result.mode == "RGBA"
    np.testing.assert_array_equal(np.asarray(result), translucent)
