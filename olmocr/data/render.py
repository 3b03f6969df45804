"""Render a PDF page to a PIL image whose longest side is a given number of pixels.

One ``pdftoppm`` call per page: ``-scale-to`` sizes the longest side without a separate ``pdfinfo``
call, and raw PPM on stdout skips the PNG encode/decode round trip. The pixels are poppler's, the
same renderer released olmOCR models were trained on.
"""

from __future__ import annotations

import io
import shutil
import subprocess

from PIL import Image

from olmocr.utils.io import local_path


class RenderError(RuntimeError):
    pass


def require_poppler() -> str:
    exe = shutil.which("pdftoppm")
    if exe is None:
        raise RuntimeError(
            "pdftoppm not found: install poppler-utils (Debian/Ubuntu: sudo apt-get install -y poppler-utils)"
        )
    return exe


def render_page(pdf_path: str, page: int = 1, longest_side: int = 1288, timeout: float = 60.0) -> Image.Image:
    """Render ``page`` (1-based) of ``pdf_path`` so its longest side is ``longest_side`` pixels."""
    if longest_side < 16:
        raise ValueError(f"longest_side must be at least 16 pixels, got {longest_side}")
    with local_path(pdf_path) as path:
        cmd = [require_poppler(), "-f", str(page), "-l", str(page), "-scale-to", str(longest_side),
               "-singlefile", path]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise RenderError(f"{pdf_path}: pdftoppm took longer than {timeout:.0f}s") from None
    if proc.returncode != 0 or not proc.stdout:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise RenderError(f"{pdf_path}: pdftoppm failed ({message[-1] if message else 'no output'})")
    image = Image.open(io.BytesIO(proc.stdout))
    image.load()
    return image.convert("RGB") if image.mode != "RGB" else image
