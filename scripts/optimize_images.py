"""Shrink the built site's PNG figures: losslessly, photographs to 256 colours, then to lossless WebP.

Usage: python scripts/optimize_images.py _build/html

Run by ``make site`` after the build. Three steps, each kept only when the file gets
smaller:

- Every PNG, losslessly. matplotlib saves every figure as RGBA with an opaque
  white background, so a quarter of each pixel is a constant 255; dropping it and
  letting Pillow search for a better compression makes a chart about 10% smaller,
  with every pixel unchanged.
- Photographs, to a palette of 256 colours. A figure that shows a photograph
  (chapter 6's portrait and its attention overlays) holds tens of thousands of
  colours, which PNG's lossless compression cannot shrink: those three images
  were 530 kB of chapter 6's page. Pillow's octree quantizer maps them to 256
  colours, a third of the size. What tells a photograph from a chart is not its
  number of colours (a chart with colour bars and anti-aliased text can have
  3,000) but where they are: in a photograph most small squares of pixels hold
  many colours, in a chart almost none do (flat areas, lines and text). So an
  image counts as a photograph when at least ``PHOTO_BLOCKS`` of its 16 x 16
  blocks hold more than 64 colours each (the course's photographs: 22-56%; its
  charts: at most 2.1%). The 256-colour version is kept only if its peak
  signal-to-noise ratio stays at or above ``MIN_PSNR_DB`` (an average error of
  about 1.5% of full scale: no difference shows at the size the page draws it).
- Every opaque figure, to lossless WebP. WebP's lossless mode stores a chart in
  well under half of its best PNG (the course's 46 figures, photographs
  included: 1.67 MB of PNG, 0.76 MB as WebP) with every pixel unchanged, which
  is checked by decoding it. The PNG is then deleted and every page's reference
  to it (the image, and the link that opens it full size) is pointed at the
  WebP file. Every current browser shows WebP (Safari since 14, 2020). A
  256-colour palette would have saved about as much, but moved the colours of
  thin lines and small markers.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import numpy as np
from PIL import Image

PHOTO_BLOCKS = 0.10  # the share of 16 x 16 blocks with more than 64 colours that makes an image a photograph
MIN_PSNR_DB = 34.0  # the 256-colour photograph must stay this close to the original


def _open(data: bytes, who: str) -> Image.Image:
    """The image encoded in ``data``, decoded; a ValueError naming ``who`` if it is not an image file's bytes."""
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError(f"{who}: expected the bytes of a PNG file, got {type(data).__name__}")
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, SyntaxError) as error:  # PIL.UnidentifiedImageError is an OSError
        raise ValueError(
            f"{who}: expected the bytes of a PNG file, got {len(data)} bytes it cannot read ({error})"
        ) from None
    return image


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(_open(data, "_pixels").convert("RGBA"))


def _opaque_rgb(image: Image.Image) -> Image.Image | None:
    """``image`` as RGB if every pixel is opaque (RGB with no transparent colour, RGBA with alpha 255), else None."""
    if image.mode == "RGB" and "transparency" not in image.info:
        return image
    if image.mode == "RGBA" and image.getchannel("A").getextrema() == (255, 255):
        return image.convert("RGB")
    return None


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def _check_image(image: object, who: str) -> None:
    if not isinstance(image, Image.Image):
        raise ValueError(f"{who}: expected a PIL image, got {type(image).__name__}")


def colour_count(image: Image.Image) -> int:
    """The number of distinct RGBA colours in ``image``."""
    _check_image(image, "colour_count")
    pixels = np.asarray(image.convert("RGBA")).reshape(-1, 4)
    return len(np.unique(pixels.view(np.uint32)))


def busy_blocks(image: Image.Image, block: int = 16, many: int = 64) -> float:
    """The share of ``image``'s whole ``block`` x ``block`` squares that hold more than ``many`` colours (0 to 1)."""
    _check_image(image, "busy_blocks")
    if block < 1 or many < 1:
        raise ValueError(f"busy_blocks needs block >= 1 and many >= 1, got block={block}, many={many}")
    rgb = np.asarray(image.convert("RGB")).astype(np.uint32)
    packed = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]  # (H, W), one number per colour
    rows, cols = packed.shape[0] // block, packed.shape[1] // block
    if rows == 0 or cols == 0:
        return 0.0
    tiles = packed[: rows * block, : cols * block].reshape(rows, block, cols, block).swapaxes(1, 2)
    tiles = np.sort(tiles.reshape(rows * cols, block * block), axis=1)
    distinct = 1 + np.count_nonzero(np.diff(tiles, axis=1), axis=1)  # colours in each block
    return float(np.mean(distinct > many))


def psnr(before: np.ndarray, after: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB of ``after`` against ``before`` (uint8 arrays of one shape); inf if equal."""
    if not all(isinstance(a, np.ndarray) and a.dtype == np.uint8 for a in (before, after)):
        kinds = [getattr(a, "dtype", type(a).__name__) for a in (before, after)]
        raise ValueError(f"psnr needs two uint8 arrays, got {kinds[0]} and {kinds[1]}")
    if before.shape != after.shape:
        raise ValueError(f"psnr needs two images of one shape, got {before.shape} and {after.shape}")
    error = np.mean((before.astype(np.float64) - after.astype(np.float64)) ** 2)
    return float("inf") if error == 0 else float(10 * np.log10(255.0**2 / error))


def optimized(data: bytes) -> bytes:
    """The PNG ``data`` re-encoded without a fully opaque alpha channel, or ``data`` if that is not smaller."""
    image = _open(data, "optimized")
    if image.mode == "RGBA" and image.getchannel("A").getextrema() == (255, 255):
        image = image.convert("RGB")
    smaller = _png(image)
    if len(smaller) >= len(data):
        return data
    return smaller if np.array_equal(_pixels(data), _pixels(smaller)) else data


def photo_optimized(data: bytes) -> bytes:
    """The PNG ``data`` with at most 256 colours if it is an opaque photograph and that passes; else ``data``.

    A photograph: fully opaque, with at least ``PHOTO_BLOCKS`` of its 16 x 16 blocks
    holding more than 64 colours. The 256-colour version is returned only if it is
    smaller and its PSNR against the original is at least ``MIN_PSNR_DB``.
    """
    image = _opaque_rgb(_open(data, "photo_optimized"))
    if image is None or busy_blocks(image) < PHOTO_BLOCKS:
        return data
    quantized = _png(image.quantize(256, method=Image.Quantize.FASTOCTREE))
    after = np.asarray(_open(quantized, "photo_optimized").convert("RGB"))
    if len(quantized) >= len(data) or psnr(np.asarray(image), after) < MIN_PSNR_DB:
        return data
    return quantized


def webp_lossless(data: bytes) -> bytes | None:
    """``data`` (a PNG) as a lossless WebP file if every pixel is opaque and the WebP is smaller; else None.

    The WebP is decoded and compared with the PNG: it is returned only if every pixel is the same.
    """
    image = _open(data, "webp_lossless")
    rgb = _opaque_rgb(image.convert("RGB") if image.mode == "P" and "transparency" not in image.info else image)
    if rgb is None:
        return None
    buffer = io.BytesIO()
    # method 4: within 3% of method 6's size, at a twentieth of its time (the course's figures: 6 s against 100 s).
    rgb.save(buffer, "WEBP", lossless=True, quality=100, method=4, exact=True)
    webp = buffer.getvalue()
    if len(webp) >= len(data):
        return None
    same = np.array_equal(np.asarray(Image.open(io.BytesIO(webp)).convert("RGB")), np.asarray(rgb))
    return webp if same else None


def point_pages_at(site: Path, renamed: dict[str, str]) -> int:
    """Replace ``_images/OLD`` by ``_images/NEW`` in every HTML page of ``site``; return how many were replaced."""
    if not renamed:
        return 0
    pattern = re.compile(r"_images/(" + "|".join(re.escape(old) for old in renamed) + r")(?=[\"'?#)])")
    replaced = 0
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        new, count = pattern.subn(lambda m: "_images/" + renamed[m.group(1)], text)
        if count:
            page.write_text(new, encoding="utf-8")
            replaced += count
    return replaced


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    site = Path(argv[0])
    if not (site / "_images").is_dir():
        print(f"optimize_images: expected a built site with an _images folder, got {site}")
        return 2
    before = after = photos = 0
    renamed: dict[str, str] = {}
    for path in sorted((site / "_images").glob("*.png")):
        data = path.read_bytes()
        lossless = optimized(data)
        photo = photo_optimized(lossless)
        photos += photo is not lossless
        webp = webp_lossless(photo)
        before += len(data)
        if webp is not None:
            path.with_suffix(".webp").write_bytes(webp)
            path.unlink()
            renamed[path.name] = path.with_suffix(".webp").name
            after += len(webp)
        else:
            if photo is not data:
                path.write_bytes(photo)
            after += len(photo)
    references = point_pages_at(site, renamed)
    pages = [page.read_text(encoding="utf-8") for page in site.rglob("*.html")]
    left = sorted(name for name in renamed if any(name in page for page in pages))
    if left:
        print(f"optimize_images: expected no page to name a deleted PNG, but pages still name {left[:5]}")
        return 1
    print(
        f"optimize_images: {before:,} -> {after:,} bytes of figures; {photos} photograph(s) in 256 colours, "
        f"{len(renamed)} figure(s) as lossless WebP ({references} references updated)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
