"""Shrink the built site's PNG figures: losslessly, and photographs to 256 colours.

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
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image

PHOTO_BLOCKS = 0.10  # the share of 16 x 16 blocks with more than 64 colours that makes an image a photograph
MIN_PSNR_DB = 34.0  # the 256-colour photograph must stay this close to the original


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
    image = Image.open(io.BytesIO(data))
    image.load()
    if image.mode not in ("RGB", "RGBA") or (image.mode == "RGBA" and image.getchannel("A").getextrema() != (255, 255)):
        return data
    image = image.convert("RGB")
    if busy_blocks(image) < PHOTO_BLOCKS:
        return data
    quantized = _png(image.quantize(256, method=Image.Quantize.FASTOCTREE))
    if len(quantized) >= len(data) or psnr(_pixels(data), _pixels(quantized)) < MIN_PSNR_DB:
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
    saved = count = photos = 0
    for path in sorted((site / "_images").glob("*.png")):
        data = path.read_bytes()
        new = optimized(data)
        photo = photo_optimized(new)
        photos += photo is not new
        if photo is not data:
            path.write_bytes(photo)
            saved += len(data) - len(photo)
            count += 1
    print(
        f"optimize_images: {count} PNG(s) rewritten ({photos} photograph(s) reduced to 256 colours), "
        f"{saved:,} bytes saved"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
