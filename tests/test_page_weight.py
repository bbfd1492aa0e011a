"""What each page loads (issue 32, page weight): static checks of the sources and of the built HTML.

- Only search.html loads the search index; every other page renders without
  waiting for it (book/_ext/page_weight.py and its layout.html).
- Code blocks without spans around the tokens drawn in the block's own colour
  (the same extension); no page loads MathJax (tests/test_static_math.py).
- The API reference is one page per part of the package, each public name
  documented exactly once, and every page listed in _toc.yml.
- scripts/optimize_images.py reduces photographs to 256 colours while they stay
  close to the original, then stores every figure as lossless WebP.

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


# ---------------------------------------------------------------- code tokens

_pw_spec = importlib.util.spec_from_file_location("page_weight", ROOT / "book" / "_ext" / "page_weight.py")
page_weight = importlib.util.module_from_spec(_pw_spec)
_pw_spec.loader.exec_module(page_weight)

PYGMENTS_CSS = """\
html[data-theme="light"] .highlight pre { line-height: 125%; }
html[data-theme="light"] .highlight { background: #fefefe; color: #080808 }
html[data-theme="light"] .highlight .n { color: #080808 } /* Name */
html[data-theme="light"] .highlight .o { color: #00622F } /* Operator */
html[data-theme="light"] .highlight .gs { color: #080808; font-weight: bold } /* Generic.Strong */
html[data-theme="light"] .highlight .w { color: #080808 } /* Text.Whitespace */
html[data-theme="light"] .highlight .x { color: #080808 } /* Other */
html[data-theme="dark"] .highlight { background: #2b2b2b; color: #F8F8F2 }
html[data-theme="dark"] .highlight .n { color: #f8f8f2 } /* Name */
html[data-theme="dark"] .highlight .o { color: #ABE338 } /* Operator */
html[data-theme="dark"] .highlight .gs { color: #F8F8F2; font-weight: bold } /* Generic.Strong */
html[data-theme="dark"] .highlight .x { color: #DCC6E0 } /* Other */
"""


def test_plain_token_classes_are_those_drawn_in_the_blocks_own_colour_in_every_theme():
    # n: the base colour in both themes (case aside); w: in one, inherited in the other. o: coloured;
    # gs: bold; x: the base colour in light but not in dark.
    assert page_weight.plain_token_classes(PYGMENTS_CSS) == {"n", "w"}
    assert page_weight.plain_token_classes("") == set()
    with pytest.raises(ValueError, match="expected pygments.css as a str, got bytes"):
        page_weight.plain_token_classes(PYGMENTS_CSS.encode())


def _text(fragment: str) -> str:
    return re.sub(r"<[^>]+>", "", fragment)


def test_unwrap_plain_tokens_only_touches_code_blocks_and_keeps_their_text():
    code = (
        '<div class="highlight"><pre><span></span><span class="n">x</span><span class="w"> </span>'
        '<span class="o">=</span><span class="w"> </span><span class="n">np</span><span class="o">.</span>'
        '<span class="n">ones</span><span class="p">(</span><span class="mi">3</span><span class="p">)</span>\n'
        "</pre></div>"
    )
    widget = '<div class="explorer"><span class="n">3</span></div>'
    page = f"<p>{widget}</p>{code}"
    after = page_weight.unwrap_plain_tokens(page, {"n", "p", "w"})
    assert widget in after  # a span outside a code block keeps its class
    assert (
        '<pre><span></span>x <span class="o">=</span> np<span class="o">.</span>ones(<span class="mi">3</span>)'
        in after
    )
    assert _text(after) == _text(page)
    assert page_weight.unwrap_plain_tokens(page, set()) == page
    with pytest.raises(ValueError, match="expected a page \\(str\\) and a set of classes, got str and list"):
        page_weight.unwrap_plain_tokens(page, ["n"])


def test_built_code_blocks_carry_no_span_for_a_plain_token():
    pages = _built_pages()
    plain = page_weight.plain_token_classes((SITE / "_static" / "pygments.css").read_text(encoding="utf-8"))
    assert {"n", "p", "w"} <= plain and not {"o", "k", "mi", "s2", "c1"} & plain, plain
    blocks = 0
    for page in pages:
        for block in re.findall(
            r'<div class="highlight[^"]*"><pre>(.*?)</pre>', page.read_text(encoding="utf-8"), re.S
        ):
            blocks += 1
            left = re.findall(r'<span class="(n|p|w)">', block)
            assert not left, f"{page.relative_to(SITE)}: {len(left)} plain tokens still wrapped"
    assert blocks > 500, blocks


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


def _palette_pixels(smaller: bytes, data: bytes) -> np.ndarray:
    """The pixels of ``smaller``, checked to be a palette PNG of at most 256 colours, under 70% of ``data``."""
    assert len(smaller) < 0.7 * len(data), (len(smaller), len(data))
    decoded = Image.open(io.BytesIO(smaller))
    assert decoded.mode == "P" and optimize_images.colour_count(decoded) <= 256
    return np.asarray(decoded.convert("RGB"))


def test_a_photograph_is_reduced_to_256_colours_and_stays_close():
    pixels = _photograph()
    data = _encode(pixels)
    assert optimize_images.busy_blocks(Image.open(io.BytesIO(data))) >= optimize_images.PHOTO_BLOCKS
    after = _palette_pixels(optimize_images.photo_optimized(data), data)
    assert optimize_images.psnr(pixels, after) >= optimize_images.MIN_PSNR_DB


def _chart(size: int = 200) -> np.ndarray:
    """A chart's pixels: a white page, three flat bars, three anti-aliased curves across them (hundreds of shades)."""
    pixels = np.full((size, size, 3), 255, np.uint8)
    for i, colour in enumerate([(31, 119, 180), (255, 127, 14), (44, 160, 44)]):
        pixels[size // 2 :, 20 + 60 * i : 60 + 60 * i] = colour
    y, x = np.mgrid[0:size, 0:size].astype(float)
    for k, colour in enumerate([(214, 39, 40), (148, 103, 189), (23, 190, 207)]):
        curve = size / 2 + size / 3 * np.sin(x / (13.0 + 7 * k) + k)
        coverage = np.clip(1.5 - np.abs(y - curve), 0, 1)[..., None]  # 1 on the curve, fading over a pixel
        pixels = np.round(pixels * (1 - coverage) + np.array(colour) * coverage).astype(np.uint8)
    return pixels


def test_a_chart_becomes_a_smaller_lossless_webp_with_every_pixel_kept():
    pixels = _chart()
    data = _encode(pixels)
    assert optimize_images.colour_count(Image.fromarray(pixels)) > 256
    assert optimize_images.photo_optimized(data) is data  # not a photograph: its colours stay
    webp = optimize_images.webp_lossless(data)
    assert webp[:4] == b"RIFF" and webp[8:12] == b"WEBP" and len(webp) < 0.7 * len(data), len(webp)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(webp)).convert("RGB")), pixels)
    # A 256-colour photograph is kept as it is, every pixel, too.
    photo = optimize_images.photo_optimized(_encode(_photograph()))
    decoded = Image.open(io.BytesIO(optimize_images.webp_lossless(photo)))
    assert np.array_equal(np.asarray(decoded.convert("RGB")), np.asarray(Image.open(io.BytesIO(photo)).convert("RGB")))


def test_a_chart_and_translucent_images_keep_their_colours_and_stay_png():
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
    translucent = _encode(np.dstack([_photograph(), np.full((160, 160), 128, np.uint8)]))
    assert optimize_images.photo_optimized(translucent) is translucent
    assert optimize_images.webp_lossless(translucent) is None
    # An RGB PNG with a transparent colour (a tRNS chunk, as oxipng writes): not opaque, so left alone.
    buffer = io.BytesIO()
    Image.fromarray(_photograph()).save(buffer, "PNG", transparency=(255, 255, 255))
    keyed = buffer.getvalue()
    assert optimize_images.photo_optimized(keyed) is keyed and optimize_images.webp_lossless(keyed) is None


def test_point_pages_at_renames_every_reference_and_nothing_else(tmp_path):
    page = tmp_path / "chapters" / "one.html"
    page.parent.mkdir()
    page.write_text(
        '<a href="../_images/ab.png"><img src="../_images/ab.png" alt="x"></a> _images/ab.png.txt '
        '<img src="../_images/cd.png"> <style>u{b:url(../_images/ab.png)}</style>',
        encoding="utf-8",
    )
    assert optimize_images.point_pages_at(tmp_path, {"ab.png": "ab.webp"}) == 3
    assert page.read_text(encoding="utf-8") == (
        '<a href="../_images/ab.webp"><img src="../_images/ab.webp" alt="x"></a> _images/ab.png.txt '
        '<img src="../_images/cd.png"> <style>u{b:url(../_images/ab.webp)}</style>'
    )
    assert optimize_images.point_pages_at(tmp_path, {}) == 0


def test_the_image_helpers_refuse_what_is_not_an_image():
    with pytest.raises(ValueError, match="optimized: expected the bytes of a PNG file, got 9 bytes it cannot read"):
        optimize_images.optimized(b"not a png")
    with pytest.raises(ValueError, match="webp_lossless: expected the bytes of a PNG file, got str"):
        optimize_images.webp_lossless("figure.png")
    with pytest.raises(ValueError, match="busy_blocks: expected a PIL image, got ndarray"):
        optimize_images.busy_blocks(_photograph())
    with pytest.raises(ValueError, match="psnr needs two uint8 arrays, got float64 and uint8"):
        optimize_images.psnr(_photograph().astype(float), _photograph())


def test_built_figures_are_lossless_webp_and_every_one_a_page_names_exists():
    pages = _built_pages()
    names = set()
    for page in pages:
        for src in re.findall(r'(?:src|href)="([^"]*_images/[^"]+)"', page.read_text(encoding="utf-8")):
            names.add(src.rsplit("/", 1)[-1])
            assert (page.parent / src).resolve().is_file(), f"{page.relative_to(SITE)}: {src} is missing"
    figures = [name for name in names if name.endswith((".png", ".webp"))]
    assert len(figures) > 40 and all(name.endswith(".webp") for name in figures), sorted(figures)[:5]


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
