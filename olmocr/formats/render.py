"""Render a PDF page to a PIL image whose longest side is a given number of pixels.

The pixels are exactly those of the renders released olmOCR models were trained on: poppler at
dpi = longest_side * 72 / longest page side, with the page size as pdfinfo prints it. (``-scale-to``
gives the same size but a slightly different effective resolution, so different anti-aliasing on A4
pages.) It is one ``pdftoppm`` call per page: the MediaBox comes from pypdf (usually already parsed
by the CheckPdf step) instead of a ``pdfinfo`` subprocess, and raw PPM on stdout skips the PNG
encode/decode round trip.
"""

from __future__ import annotations

import io
import subprocess

from PIL import Image

from olmocr.errors import UserError
from olmocr.formats.pdf import PdfError, failure, pdf_page_size, run_poppler
from olmocr.utils.io import local_path


class RenderError(RuntimeError):
    pass


def render_page(pdf_path: str, page: int = 1, longest_side: int = 1288,
                page_size: tuple[float, float] | None = None, data: bytes | None = None,
                timeout: float = 60.0) -> Image.Image:
    """Render ``page`` (1-based) of ``pdf_path`` so its longest side is ``longest_side`` pixels (poppler
    rounds up, so floating-point error in the dpi can add one pixel, as in the reference renders).

    ``page_size`` is the page's MediaBox (width, height) in points; read with pypdf when not given.
    ``data`` is the PDF's bytes when the caller has them (a remote PDF is then not fetched again).
    """
    if longest_side < 16:
        raise UserError(f"longest_side must be at least 16 pixels, got {longest_side}")
    if page_size is None:
        try:
            page_size = pdf_page_size(pdf_path, page, data)
        except PdfError as exc:
            raise RenderError(str(exc)) from None
    # pdfinfo prints sizes with %g (841.89, not 841.8898); dpi from the printed value is what the
    # reference renders used, and the sixth digit is enough to change anti-aliasing at 1288 px.
    dpi = longest_side * 72 / float(f"{max(page_size):g}")
    with local_path(pdf_path, data) as path:
        try:
            proc = run_poppler("pdftoppm", ["-f", str(page), "-l", str(page), "-r", repr(dpi), "-singlefile", path],
                               timeout)
        except subprocess.TimeoutExpired:
            raise RenderError(f"{pdf_path}: pdftoppm took longer than {timeout:.0f}s") from None
    if proc.returncode != 0 or not proc.stdout:
        raise RenderError(f"{pdf_path}: pdftoppm failed ({failure(proc)})")
    image = Image.open(io.BytesIO(proc.stdout))
    image.load()
    return image.convert("RGB") if image.mode != "RGB" else image
