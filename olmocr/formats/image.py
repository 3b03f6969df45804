"""Image documents: a PNG, JPEG, TIFF, WebP, … file is a document whose frames are its pages (a
multi-page TIFF is how many scanning archives ship). A page is shown to the model as a PDF page is:
upright by its EXIF orientation, on white where it is transparent, scaled so its longest side is the
render size."""

from __future__ import annotations

import io
import warnings

from PIL import Image, ImageOps, UnidentifiedImageError

from olmocr.formats.document import DocumentError

# EXIF orientations that swap width and height (a phone photo held upright, stored sideways).
_TRANSPOSED = {5, 6, 7, 8}
_ORIENTATION = 0x0112


class ImageError(DocumentError):
    """An image that cannot be read; the message says why."""


def _open(path: str, data: bytes) -> Image.Image:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # a bomb is bad, not slow
            return Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageError("image_too_large", f"{path}: {exc}") from None
    except UnidentifiedImageError:
        raise ImageError("unreadable_image", f"{path}: not an image format Pillow reads") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError("unreadable_image", f"{path}: {exc}") from None


def image_pages(path: str, data: bytes) -> list[tuple[int, int]]:
    """Every page's (width, height) in pixels, as shown upright. Every frame is decoded once here, so a
    truncated or corrupt image is a bad document before any page of it is sent anywhere."""
    image = _open(path, data)
    sizes = []
    try:
        for frame in range(getattr(image, "n_frames", 1)):
            image.seek(frame)
            image.load()
            width, height = image.size
            if image.getexif().get(_ORIENTATION) in _TRANSPOSED:
                width, height = height, width
            sizes.append((width, height))
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageError("unreadable_image", f"{path}: frame {len(sizes) + 1}: {exc}") from None
    if not sizes or min(min(size) for size in sizes) < 1:
        raise ImageError("unreadable_image", f"{path} has no pixels")
    return sizes


def image_format(data: bytes) -> str:
    """The image's file suffix by its format (``png``, ``jpg``, ``tiff``…), from its header."""
    name = (_open("the image", data).format or "").lower()
    return {"jpeg": "jpg", "mpo": "jpg"}.get(name, name or "img")


def render_image(path: str, data: bytes, page: int = 1, longest_side: int | None = 1288) -> Image.Image:
    """Page ``page`` (1-based frame) of an image document, RGB, its longest side ``longest_side`` pixels
    (None: as stored)."""
    image = _open(path, data)
    frames = getattr(image, "n_frames", 1)
    if not 1 <= page <= frames:
        raise ImageError("unreadable_image", f"{path} has no page {page} (it has {frames})")
    try:
        image.seek(page - 1)
        image = ImageOps.exif_transpose(image)
        if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
            rgba = image.convert("RGBA")
            image = Image.new("RGB", rgba.size, "white")
            image.paste(rgba, mask=rgba.getchannel("A"))
        elif image.mode.startswith("I") or image.mode == "F":
            # 16-bit and float scans: stretched to 8 bits over their own range, not clipped at 255
            image = image.convert("F")
            low, high = image.getextrema()
            scale = 255.0 / ((high - low) or 1.0)
            image = image.point(lambda v: v * scale - low * scale).convert("L")
        image = image.convert("RGB")
        if longest_side is None:
            return image
        scale = longest_side / max(image.size)
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        return image.resize(size, Image.Resampling.LANCZOS) if size != image.size else image
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageError("unreadable_image", f"{path}: page {page}: {exc}") from None


def image_page_pdf(path: str, page: int, data: bytes) -> bytes:
    """Page ``page`` of an image document as a one-page PDF of its pixels (losslessly embedded, one point
    per pixel), so a training folder of PDFs can hold it."""
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen.canvas import Canvas

    image = render_image(path, data, page, None)
    out = io.BytesIO()
    canvas = Canvas(out, pagesize=image.size, invariant=1)
    canvas.drawImage(ImageReader(image), 0, 0, width=image.width, height=image.height)
    canvas.save()
    return out.getvalue()
