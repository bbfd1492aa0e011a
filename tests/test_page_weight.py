"""What each page loads (issue 32, page weight): static checks of the sources and of the built HTML.

- Only search.html loads the search index; every other page renders without
  waiting for it (book/_ext/page_weight.py and its layout.html).
- MathJax only on pages that have math (the same extension).
- The API reference is one page per part of the package, each public name
  documented exactly once, and every page listed in _toc.yml.
- scripts/optimize_images.py reduces photographs to 256 colours and leaves
  charts alone.

The checks of the built site read _build/html (``make site`` builds it; set
SITE_HTML to check another build). Without a built site they are skipped with a
message, except under CI=true, where they fail.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import selfattention as sa

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("SITE_HTML", ROOT / "_build" / "html"))
API_INDEX = ROOT / "book" / "api.md"
API_PAGES = sorted((ROOT / "book" / "api").glob("*.md"))
# The API page was one 616 KiB page; each part is now a fraction of that.
API_PAGE_LIMIT = 250_000

_spec = importlib.util.spec_from_file_location("optimize_images", ROOT / "scripts" / "optimize_images.py")
optimize_images = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(optimize_images)


def _built_pages() -> list[Path]:
    if not (SITE / "index.html").is_file():
        message = f"no built site in {SITE}: run `make site` first"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    pages = sorted(path for path in SITE.rglob("*.html") if "_static" not in path.parts)
    assert len(pages) > 20, f"only {len(pages)} pages in {SITE}"
    return pages


def _scripts(html: str) -> list[str]:
    """The src of every <script> element in the page, without its query string."""
    return [src.split("?")[0] for src in re.findall(r"<script\b[^>]*\bsrc=\"([^\"]+)\"", html)]


def _head(html: str) -> str:
    return html.split("</head>", 1)[0]


# ---------------------------------------------------------------- the search index


def test_only_the_search_page_loads_the_search_index():
    loading = []
    for page in _built_pages():
        scripts = _scripts(page.read_text(encoding="utf-8"))
        name = page.relative_to(SITE).as_posix()
        if any(src.endswith(("searchindex.js", "searchtools.js", "language_data.js")) for src in scripts):
            loading.append(name)
    assert loading == ["search.html"], f"pages that load the search index or search tools: {loading}"


def test_the_search_page_loads_the_index_and_its_tools():
    scripts = _scripts((SITE / "search.html").read_text(encoding="utf-8")) if _built_pages() else []
    for name in ("searchtools.js", "language_data.js", "searchindex.js"):
        assert any(src.endswith(name) for src in scripts), f"search.html does not load {name}: {scripts}"


def test_every_page_keeps_the_theme_meta_tags():
    """The template that drops the search scripts rewrites the theme's extrahead block: keep what else it held."""
    for page in _built_pages():
        head = _head(page.read_text(encoding="utf-8"))
        name = page.relative_to(SITE).as_posix()
        if 'http-equiv="Refresh"' in head:
            continue  # index.html only redirects to the landing page
        assert 'name="docsearch:language"' in head, f"{name}: the theme's meta tags are missing"
        assert 'name="viewport"' in head, f"{name}: no viewport meta tag"


def test_no_page_blocks_its_first_render_on_a_large_script():
    """No page's head has a synchronous script larger than 50 kB: such a script blocks the first render."""
    for page in _built_pages():
        head = _head(page.read_text(encoding="utf-8"))
        name = page.relative_to(SITE).as_posix()
        for tag in re.findall(r"<script\b[^>]*\bsrc=\"[^\"]+\"[^>]*>", head):
            if re.search(r"\b(defer|async)\b", tag) or name == "search.html":
                continue
            src = re.search(r"src=\"([^\"?]+)", tag).group(1)
            size = (page.parent / src).stat().st_size
            assert size < 50_000, f"{name}: {src} ({size:,} bytes) blocks the first render"


# ---------------------------------------------------------------- MathJax


def test_mathjax_loads_only_on_pages_with_math():
    with_math = without_math = 0
    for page in _built_pages():
        html = page.read_text(encoding="utf-8")
        name = page.relative_to(SITE).as_posix()
        has_math = 'class="math' in html
        loads = any("mathjax" in src for src in _scripts(html))
        configures = "window.MathJax = " in _head(html)
        assert loads == has_math, f"{name}: loads MathJax={loads} but has math={has_math}"
        assert configures == has_math, f"{name}: configures MathJax={configures} but has math={has_math}"
        with_math += has_math
        without_math += not has_math
    # The landing page lists every chapter, and Sphinx used to give it MathJax for theirs.
    assert with_math >= 15 and without_math >= 4, (with_math, without_math)
    assert "mathjax" not in _head((SITE / "book" / "intro.html").read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the API reference


def _documented(text: str, prefix: str = "selfattention") -> list[str]:
    return re.findall(rf"\.\. auto(?:function|class|data):: {re.escape(prefix)}\.(\w+)\s", text)


def test_the_api_reference_is_split_into_pages_listed_in_the_toc_and_the_index():
    assert len(API_PAGES) >= 10, f"expected one page per part of the package in book/api/, found {len(API_PAGES)}"
    toc = (ROOT / "_toc.yml").read_text()
    index = API_INDEX.read_text()
    for page in API_PAGES:
        assert f"file: book/api/{page.stem}\n" in toc, f"_toc.yml does not list book/api/{page.stem}"
        assert f"{{doc}}`api/{page.stem}`" in index, f"book/api.md does not link api/{page.stem}"
    assert "auto" not in re.sub(r"`[^`]*`", "", index), "the index page documents no names itself"


def test_every_public_name_is_documented_exactly_once():
    texts = [page.read_text() for page in API_PAGES] + [API_INDEX.read_text()]
    documented = [name for text in texts for name in _documented(text)]
    twice = sorted({name for name in documented if documented.count(name) > 1})
    assert not twice, f"documented on more than one API page: {twice}"
    missing = sorted(set(sa.__all__) - set(documented))
    assert not missing, f"add these to a page in book/api/: {missing}"
    interactive = [name for text in texts for name in _documented(text, "selfattention.interactive")]
    assert sorted(interactive) == sorted(set(interactive)) == sorted(sa.interactive.__all__)
    llm = [name for text in texts for name in _documented(text, "selfattention.llm")]
    assert len(llm) == len(set(llm)) > 10


def test_every_built_api_page_is_small():
    _built_pages()
    for page in API_PAGES:
        built = SITE / "book" / "api" / f"{page.stem}.html"
        assert built.is_file(), f"{built} was not built"
        size = built.stat().st_size
        assert size < API_PAGE_LIMIT, f"{built.name}: {size:,} bytes of HTML (limit {API_PAGE_LIMIT:,})"


def test_the_toc_says_going_further_not_beyond_the_sources():
    toc = (ROOT / "_toc.yml").read_text()
    assert "caption: Going further" in toc and "Beyond the sources" not in toc


# ---------------------------------------------------------------- photographs


def _encode(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def _photograph(size: int = 160) -> np.ndarray:
    """Smooth shading with sensor-like noise: thousands of colours in a narrow range, as a photograph has."""
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:size, 0:size] / size
    base = np.stack([0.5 + 0.2 * np.sin(6 * x + 2 * y), 0.45 + 0.2 * np.cos(5 * y), 0.4 + 0.2 * x * y], axis=-1)
    noisy = base * 255 + rng.normal(0, 2.0, base.shape)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def test_a_photograph_is_reduced_to_256_colours_and_stays_close():
    pixels = _photograph()
    data = _encode(pixels)
    assert optimize_images.busy_blocks(Image.open(io.BytesIO(data))) >= optimize_images.PHOTO_BLOCKS
    smaller = optimize_images.photo_optimized(data)
    assert len(smaller) < 0.7 * len(data), (len(smaller), len(data))
    decoded = Image.open(io.BytesIO(smaller))
    assert decoded.mode == "P" and optimize_images.colour_count(decoded) <= 256
    after = np.asarray(decoded.convert("RGB"))
    assert optimize_images.psnr(pixels, after) >= optimize_images.MIN_PSNR_DB


def test_a_chart_and_a_translucent_image_are_left_alone():
    # A heatmap of 64 x 64 flat cells, 4 px each: 4,096 colours, more than a photograph's palette, but every
    # 16 x 16 block holds only 16 of them, as a chart's flat areas, lines and text do.
    rng = np.random.default_rng(2)
    cells = rng.permutation(np.arange(4096)).reshape(64, 64)
    colours = np.stack([cells // 256 * 16, cells // 16 % 16 * 16, cells % 16 * 16], axis=-1).astype(np.uint8)
    chart = colours.repeat(4, axis=0).repeat(4, axis=1)
    assert optimize_images.colour_count(Image.fromarray(chart)) == 4096
    assert optimize_images.busy_blocks(Image.fromarray(chart)) == 0.0
    data = _encode(chart)
    assert optimize_images.photo_optimized(data) is data
    translucent = np.dstack([_photograph(), np.full((160, 160), 128, np.uint8)])
    data = _encode(translucent)
    assert optimize_images.photo_optimized(data) is data


def test_busy_blocks_counts_blocks_with_many_colours_and_refuses_a_zero_block():
    half = _photograph(64)
    half[:, :32] = 255  # the left half flat white: two of the four 32 x 32 blocks are busy
    assert optimize_images.busy_blocks(Image.fromarray(half), block=32) == 0.5
    with pytest.raises(ValueError, match="block >= 1 and many >= 1, got block=0, many=64"):
        optimize_images.busy_blocks(Image.fromarray(half), block=0)


def test_psnr_is_infinite_for_equal_images_and_refuses_two_shapes():
    pixels = _photograph(32)
    assert optimize_images.psnr(pixels, pixels) == float("inf")
    with pytest.raises(ValueError, match=r"one shape, got \(32, 32, 3\) and \(16, 16, 3\)"):
        optimize_images.psnr(pixels, pixels[:16, :16])
