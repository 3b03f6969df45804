"""A mixed input folder as scanning archives and crawls ship them: PDFs, a PNG, a JPEG, a three-frame TIFF,
a .tar.gz holding two PDFs and a PNG, and a corrupt image."""

from __future__ import annotations

import io
import os
import tarfile

from conftest import write_pdf
from PIL import Image, ImageDraw


def page_image(text: str, size=(300, 200), mode: str = "RGB") -> Image.Image:
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((10, 10), text, fill="black")
    return image.convert(mode)


def encoded(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def build(folder: str) -> dict[str, int]:
    """The folder's documents (archive members as ``<archive>::<member>``) and their page counts; the corrupt
    image is ``corrupt.png``."""
    os.makedirs(folder, exist_ok=True)
    pages = {}
    pages[write_pdf(os.path.join(folder, "report.pdf"), ["Report page one", "Report page two"])] = 2
    pages[write_pdf(os.path.join(folder, "letter.pdf"), ["A letter"])] = 1
    for name, fmt in (("scan.png", "PNG"), ("photo.jpg", "JPEG")):
        path = os.path.join(folder, name)
        with open(path, "wb") as fh:
            fh.write(encoded(page_image(name), fmt))
        pages[path] = 1
    frames = [page_image(f"frame {n}", mode="L") for n in (1, 2, 3)]
    tiff = os.path.join(folder, "book.tiff")
    frames[0].save(tiff, format="TIFF", save_all=True, append_images=frames[1:])
    pages[tiff] = 3
    archive = os.path.join(folder, "crawl.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        for member, data in (("docs/first.pdf", open(write_pdf(os.path.join(folder, ".first.tmp"), ["Packed one"]), "rb").read()),
                             ("docs/second.pdf", open(write_pdf(os.path.join(folder, ".second.tmp"), ["Packed two", "Packed two, again"]), "rb").read()),
                             ("figure.png", encoded(page_image("packed figure"), "PNG"))):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    for tmp in (".first.tmp", ".second.tmp"):
        os.remove(os.path.join(folder, tmp))
    pages.update({f"{archive}::docs/first.pdf": 1, f"{archive}::docs/second.pdf": 2, f"{archive}::figure.png": 1})
    with open(os.path.join(folder, "corrupt.png"), "wb") as fh:
        fh.write(encoded(page_image("cut"), "PNG")[:60])  # a PNG's header, then nothing
    return pages
