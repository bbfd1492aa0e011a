"""Shrink the built site's PNG figures: losslessly, then photographs and charts to 256 colours.

Usage: python scripts/optimize_images.py _build/html

Run by ``make site`` after the build. Two steps, each kept only when the file gets
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
- Charts, to a palette of 256 colours too, under stricter tests. A chart's few
  thousand colours are mostly the anti-aliased edges of its lines and text, and a
  palette PNG stores one byte per pixel instead of three: the course's charts
  shrink to about 40% of their size (3.9 MB of figures become 1.6 MB). Pillow's
  median-cut quantizer, without dithering, keeps the colours that cover the most
  pixels. The palette version is kept only if its PSNR is at least
  ``MIN_CHART_PSNR_DB`` (an average error under 0.6% of full scale) and no pixel
  inside a flat area (a heatmap cell, a bar, a marker: a pixel whose 3 x 3
  neighbourhood is one colour) moves by more than ``MAX_FLAT_ERROR`` levels of
  255 in any channel, so a colour that encodes a value stays that value's
  colour. A chart that fails either keeps its lossless version.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image

PHOTO_BLOCKS = 0.10  # the share of 16 x 16 blocks with more than 64 colours that makes an image a photograph
MIN_PSNR_DB = 34.0  # the 256-colour photograph must stay this close to the original
MIN_CHART_PSNR_DB = 44.0  # the 256-colour chart must stay this close to the original
MAX_FLAT_ERROR = 8  # ... and no pixel inside a flat area of it may move by more levels than this


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"))


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def colour_count(image: Image.Image) -> int:
    """The number of distinct RGBA colours in ``image``."""
    pixels = np.asarray(image.convert("RGBA")).reshape(-1, 4)
    return len(np.unique(pixels.view(np.uint32)))


def busy_blocks(image: Image.Image, block: int = 16, many: int = 64) -> float:
    """The share of ``image``'s whole ``block`` x ``block`` squares that hold more than ``many`` colours (0 to 1)."""
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
    if before.shape != after.shape:
        raise ValueError(f"psnr needs two images of one shape, got {before.shape} and {after.shape}")
    error = np.mean((before.astype(np.float64) - after.astype(np.float64)) ** 2)
    return float("inf") if error == 0 else float(10 * np.log10(255.0**2 / error))


def flat_error(before: np.ndarray, after: np.ndarray) -> int:
    """The largest channel error of ``after`` against ``before`` (uint8 RGB arrays of one shape) over ``before``'s
    flat pixels: those whose 3 x 3 neighbourhood holds one colour. 0 if there are none."""
    if before.shape != after.shape or before.ndim != 3 or before.shape[-1] != 3:
        raise ValueError(
            f"flat_error needs two RGB images (H, W, 3) of one shape, got {before.shape} and {after.shape}"
        )
    rgb = before.astype(np.uint32)
    packed = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    height, width = packed.shape
    if height < 3 or width < 3:
        return 0
    centre = packed[1:-1, 1:-1]
    flat = np.ones(centre.shape, dtype=bool)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            flat &= packed[dy : dy + height - 2, dx : dx + width - 2] == centre
    error = np.abs(before.astype(np.int16) - after.astype(np.int16)).max(axis=-1)[1:-1, 1:-1]
    return int(error[flat].max()) if flat.any() else 0


def _opaque_rgb(image: Image.Image) -> Image.Image | None:
    """``image`` as RGB if it is RGB or fully opaque RGBA, else None (a palette or translucent image)."""
    if image.mode == "RGB" or (image.mode == "RGBA" and image.getchannel("A").getextrema() == (255, 255)):
        return image.convert("RGB")
    return None


def optimized(data: bytes) -> bytes:
    """The PNG ``data`` re-encoded without a fully opaque alpha channel, or ``data`` if that is not smaller."""
    image = Image.open(io.BytesIO(data))
    image.load()
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
    image = _opaque_rgb(Image.open(io.BytesIO(data)))
    if image is None or busy_blocks(image) < PHOTO_BLOCKS:
        return data
    quantized = _png(image.quantize(256, method=Image.Quantize.FASTOCTREE))
    if len(quantized) >= len(data) or psnr(_pixels(data), _pixels(quantized)) < MIN_PSNR_DB:
        return data
    return quantized


def chart_optimized(data: bytes) -> bytes:
    """The PNG ``data`` with at most 256 colours if it is an opaque chart and that passes; else ``data``.

    A chart: fully opaque and not a photograph (see :func:`photo_optimized`). The
    median-cut palette version is returned only if it is smaller, its PSNR is at
    least ``MIN_CHART_PSNR_DB`` and its :func:`flat_error` at most ``MAX_FLAT_ERROR``.
    """
    image = _opaque_rgb(Image.open(io.BytesIO(data)))
    if image is None or busy_blocks(image) >= PHOTO_BLOCKS:
        return data
    quantized = _png(image.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE))
    if len(quantized) >= len(data):
        return data
    before, after = np.asarray(image), np.asarray(Image.open(io.BytesIO(quantized)).convert("RGB"))
    if psnr(before, after) < MIN_CHART_PSNR_DB or flat_error(before, after) > MAX_FLAT_ERROR:
        return data
    return quantized


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    site = Path(argv[0])
    if not (site / "_images").is_dir():
        print(f"optimize_images: expected a built site with an _images folder, got {site}")
        return 2
    saved = count = photos = charts = 0
    for path in sorted((site / "_images").glob("*.png")):
        data = path.read_bytes()
        new = optimized(data)
        photo = photo_optimized(new)
        chart = chart_optimized(photo)
        photos += photo is not new
        charts += chart is not photo
        if chart is not data:
            path.write_bytes(chart)
            saved += len(data) - len(chart)
            count += 1
    print(
        f"optimize_images: {count} PNG(s) rewritten ({photos} photograph(s) and {charts} chart(s) reduced to "
        f"256 colours), {saved:,} bytes saved"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
