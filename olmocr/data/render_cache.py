"""``data.render_cache``: rendered pages kept on disk, so a page is rendered once for every run that reads it.

Rendering is most of what a training sample costs the CPU (a ``pdftoppm`` process per page: about 11 ms of a
reading page's 16). A run that reads its pages more than once (epochs, a resumed run, the blind control
beside its run, GRPO and DPO from the same pages) reads them from here instead. A render is keyed by what
makes its pixels: the PDF's bytes, the page, the size and the poppler that drew it, so an edited PDF, another
size or a new poppler misses and is rendered anew; nothing is ever served stale. Files are PNG (lossless: a
cached page is the render, pixel for pixel) and appear whole (written aside, then renamed), so processes
sharing the folder (loader workers, the ranks of a job, other runs) never read one cut short, and a file that
does not decode is rendered again.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import subprocess

from PIL import Image

log = logging.getLogger(__name__)


@functools.cache
def poppler_version() -> str:
    """What ``pdftoppm -v`` says of itself (its anti-aliasing is part of the pixels), or '' without it."""
    from olmocr.formats.pdf import MissingTool, poppler

    try:
        proc = subprocess.run([poppler("pdftoppm"), "-v"], capture_output=True, text=True, timeout=30, check=False)
    except (MissingTool, OSError, subprocess.TimeoutExpired):
        return ""
    said = (proc.stderr or proc.stdout).strip()
    return said.splitlines()[0] if said else ""


class RenderCache:
    def __init__(self, folder: str):
        self.folder = os.path.abspath(os.path.expanduser(folder))
        self.unwritable = False  # said once: a full disk would otherwise say it for every page

    def path(self, pdf_bytes: bytes, page: int, longest_side: int) -> str:
        digest = hashlib.sha256(pdf_bytes)
        digest.update(f"\0{page}\0{longest_side}\0{poppler_version()}".encode())
        key = digest.hexdigest()
        return os.path.join(self.folder, key[:2], f"{key[2:34]}.png")

    def get(self, path: str) -> Image.Image | None:
        try:
            with open(path, "rb") as fh:
                image = Image.open(io.BytesIO(fh.read()))
                image.load()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # cut short by a full disk, say: drawn again and written over
            log.warning("render cache: %s does not decode (%s); rendering the page again", path, exc)
            return None
        return image.convert("RGB") if image.mode != "RGB" else image

    def put(self, path: str, image: Image.Image) -> None:
        """Keep ``image`` at ``path``; a cache that cannot be written (a full disk, no permission) is said and
        skipped: the run goes on with the render it has."""
        tmp = f"{path}.{os.getpid()}.partial"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            image.save(tmp, format="PNG", compress_level=1)
            os.replace(tmp, path)
        except OSError as exc:
            if not self.unwritable:
                log.warning("data.render_cache: cannot write %s (%s); going on without keeping pages that do not "
                            "fit", path, exc)
                self.unwritable = True
            try:
                os.remove(tmp)
            except OSError:
                pass
