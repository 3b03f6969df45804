"""Reading a PDF's structure and text layer with pypdf (no rendering)."""

from __future__ import annotations

import datetime
import io
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass

from olmocr.formats.document import DocumentError
from olmocr.utils.io import local_path, read_bytes

# pypdf logs every recoverable oddity of real-world PDFs at WARNING; rejections are reported by us.
logging.getLogger("pypdf").setLevel(logging.ERROR)


class PdfError(DocumentError):
    """A PDF that cannot serve as a page source; the message says why."""


class MissingTool(RuntimeError):
    """A poppler tool this machine lacks: the machine's problem, not the PDF's."""


def poppler(tool: str) -> str:
    """The path of a poppler tool; MissingTool when it is not installed."""
    exe = shutil.which(tool)
    if exe is None:
        raise MissingTool(f"{tool} not found: install poppler-utils (Debian/Ubuntu: sudo apt-get install -y poppler-utils)")
    return exe


# How often a poppler run that a signal ended is started again.
SIGNAL_ATTEMPTS = 3


def run_poppler(tool: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run a poppler tool on a PDF; TimeoutExpired past ``timeout`` seconds.

    A run that a signal ended is run again: the signal was meant for the job the tool runs in (a scheduler
    sends SIGTERM to every process of a job it requeues, a preemption notice goes to all of them, a
    pipeline worker's SIGTERM reaches its group), not a verdict on the PDF. Taken for a bad page, it
    dropped a training sample a resumed run then trained on (other losses than an uninterrupted run), or
    recorded a good document as unreadable.
    """
    exe = poppler(tool)
    for _ in range(SIGNAL_ATTEMPTS):
        proc = subprocess.run([exe, *args], capture_output=True, timeout=timeout, check=False)
        if proc.returncode >= 0:
            break
    return proc


def failure(proc: subprocess.CompletedProcess) -> str:
    """Why a poppler run failed, in a few words: its last line on stderr, or the signal that ended it."""
    if proc.returncode < 0:
        return f"ended by {signal.Signals(-proc.returncode).name} {SIGNAL_ATTEMPTS} times"
    message = proc.stderr.decode(errors="replace").strip().splitlines()
    return message[-1] if message else "no output"


@dataclass(frozen=True)
class PdfInfo:
    num_pages: int
    width: float
    height: float


def open_pdf(path: str, data: bytes | None = None):
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError  # every pypdf error (PdfReadError, LimitReachedError: a tree too deep)

    data = read_bytes(path) if data is None else data
    if not data:
        raise PdfError("empty_pdf", f"{path} is zero bytes")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # An owner-password-only PDF opens with the empty user password and renders fine.
            try:
                if not reader.decrypt(""):
                    raise PdfError("encrypted_pdf", f"{path} needs a password")
            except PdfError:
                raise
            except Exception as exc:  # pypdf raises several types for unsupported encryption
                raise PdfError("encrypted_pdf", f"{path}: {exc}") from None
        len(reader.pages)
    except PdfError:
        raise
    except RecursionError:
        raise PdfError("unreadable_pdf", f"{path}: its page tree is nested too deeply to read") from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise PdfError("unreadable_pdf", f"{path}: {exc}") from None
    return reader


# The largest page PDF allows (ISO 32000: 14,400 units, 200 inches, a side); a larger or empty MediaBox is no page.
MAX_PAGE_SIDE = 14400.0


def _displayed_size(pdf_page) -> tuple[float, float]:
    box = pdf_page.mediabox
    width, height = float(box.width), float(box.height)
    if int(pdf_page.get("/Rotate", 0) or 0) % 180 == 90:
        width, height = height, width
    return width, height


def pdf_info(path: str, data: bytes | None = None) -> PdfInfo:
    """Page count and the first page's displayed size (MediaBox, turned by /Rotate) in points."""
    reader = open_pdf(path, data)
    pages = len(reader.pages)
    if pages == 0:
        raise PdfError("unreadable_pdf", f"{path} has no pages")
    return PdfInfo(pages, *_displayed_size(reader.pages[0]))


@dataclass(frozen=True)
class PdfLayout:
    page_sizes: list[tuple[float, float]]  # displayed (width, height) of every page, in points
    created: datetime.datetime | None  # the document's creation date, when its metadata has a valid one


def pdf_layout(path: str, data: bytes | None = None) -> PdfLayout:
    """Every page's displayed size and the creation date, from one parse (a caller converting all pages
    of a document opens it once, not once per page)."""
    reader = open_pdf(path, data)
    try:
        sizes = [_displayed_size(page) for page in reader.pages]
    except RecursionError:
        raise PdfError("unreadable_pdf", f"{path}: its page tree is nested too deeply to read") from None
    except Exception as exc:  # pypdf raises many types on broken page trees
        raise PdfError("unreadable_pdf", f"{path}: page tree: {exc}") from None
    if not sizes:
        raise PdfError("unreadable_pdf", f"{path} has no pages")
    for number, (width, height) in enumerate(sizes, start=1):
        if not (0 < width <= MAX_PAGE_SIDE and 0 < height <= MAX_PAGE_SIDE):  # NaN fails both
            raise PdfError("bad_page_size", f"{path}: page {number} is {width:g} x {height:g} pt: a page is more than "
                                            f"0 and at most {MAX_PAGE_SIDE:g} pt (200 in) a side")
    try:
        created = reader.metadata.creation_date if reader.metadata else None
    except Exception:  # noqa: BLE001 - a malformed date string is common and harmless: no date
        created = None
    return PdfLayout(sizes, created)


def text_layer(path: str, page: int = 1, data: bytes | None = None, timeout: float = 60.0) -> str:
    """The page's own text, in reading order as poppler's ``pdftotext`` finds it ('' when it has none)."""
    with local_path(path, data) as local:
        try:
            proc = run_poppler("pdftotext", ["-f", str(page), "-l", str(page), "-enc", "UTF-8", local, "-"], timeout)
        except subprocess.TimeoutExpired:
            raise PdfError("unreadable_pdf", f"{path}: pdftotext took longer than {timeout:.0f}s") from None
    if proc.returncode != 0:
        raise PdfError("unreadable_pdf", f"{path}: pdftotext failed ({failure(proc)})")
    # pdftotext ends every page with a form feed; blank lines around the text carry nothing.
    return proc.stdout.decode("utf-8", errors="replace").replace("\f", "").strip()


def single_page(path: str, page: int, data: bytes | None = None, timeout: float = 60.0) -> bytes:
    """Page ``page`` of a PDF as a PDF of its own (poppler's ``pdfseparate``; its ``/Rotate`` kept)."""
    with local_path(path, data) as local, tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "page.pdf")
        try:
            proc = run_poppler("pdfseparate", ["-f", str(page), "-l", str(page), local, out], timeout)
        except subprocess.TimeoutExpired:
            raise PdfError("unreadable_pdf", f"{path}: pdfseparate took longer than {timeout:.0f}s") from None
        if proc.returncode != 0 or not os.path.exists(out):
            raise PdfError("unreadable_pdf", f"{path}: page {page} could not be cut out ({failure(proc)})")
        with open(out, "rb") as fh:
            return fh.read()


def pdf_pages(path: str, data: bytes, pages: list[int]) -> bytes:
    """A PDF of the document's ``pages`` (numbered from 1), in that order."""
    from pypdf import PdfWriter

    reader = open_pdf(path, data)
    writer = PdfWriter()
    for number in pages:
        writer.add_page(reader.pages[number - 1])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_page_size(path: str, page: int = 1, data: bytes | None = None) -> tuple[float, float]:
    reader = open_pdf(path, data)
    if not 1 <= page <= len(reader.pages):
        raise PdfError("unreadable_pdf", f"{path} has no page {page} (it has {len(reader.pages)})")
    return _displayed_size(reader.pages[page - 1])


def anchor_text(path: str, page: int = 1, max_chars: int = 4000, data: bytes | None = None) -> str:
    """The page's text layer as ``[x,y]text`` lines (PDF points, origin bottom-left), capped.

    When the page has more text than ``max_chars`` the lines are kept in reading order up to the cap:
    a prompt that ends mid-page tells the model less than the image does, never something false.
    """
    reader = open_pdf(path, data)
    pdf_page = reader.pages[page - 1]
    box = pdf_page.mediabox
    pieces: list[tuple[float, float, str]] = []

    def visit(text, cm, tm, font_dict, font_size):
        text = text.strip()
        if text:
            x = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]
            y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
            pieces.append((x, y, text))

    try:
        pdf_page.extract_text(visitor_text=visit)
    except Exception as exc:  # pypdf's text extraction raises many types on odd content streams
        raise PdfError("unreadable_pdf", f"{path}: text layer: {exc}") from None
    header = f"Page dimensions: {float(box.width):.1f}x{float(box.height):.1f}\n"
    out = [header]
    used = len(header)
    for x, y, text in pieces:
        line = f"[{x:.0f}x{y:.0f}]{text}\n"
        if used + len(line) > max_chars:
            break
        out.append(line)
        used += len(line)
    return "".join(out).rstrip("\n")
