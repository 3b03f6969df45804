"""Typefaces synthetic pages are set in: reportlab's standard PDF fonts, and TrueType faces from Debian's font
packages, embedded in the PDF (poppler draws them as a reader of the page would see them).

A face is a name (``courier``, ``dejavu-serif``, …) for a regular and a bold font; :func:`face` registers its
TrueType files with reportlab the first time it is asked for, so widths (line breaking) and drawing agree.
"""

from __future__ import annotations

import os

from olmocr.errors import UserError

STANDARD = {"courier": ("Courier", "Courier-Bold"), "helvetica": ("Helvetica", "Helvetica-Bold"),
            "times": ("Times-Roman", "Times-Bold")}
# name: (Debian package, regular file, bold file), under FONT_ROOT
TRUETYPE = {
    "dejavu-sans": ("fonts-dejavu-core", "dejavu/DejaVuSans.ttf", "dejavu/DejaVuSans-Bold.ttf"),
    "dejavu-serif": ("fonts-dejavu-core", "dejavu/DejaVuSerif.ttf", "dejavu/DejaVuSerif-Bold.ttf"),
    "dejavu-mono": ("fonts-dejavu-core", "dejavu/DejaVuSansMono.ttf", "dejavu/DejaVuSansMono-Bold.ttf"),
    "carlito": ("fonts-crosextra-carlito", "crosextra/Carlito-Regular.ttf", "crosextra/Carlito-Bold.ttf"),
    "caladea": ("fonts-crosextra-caladea", "crosextra/Caladea-Regular.ttf", "crosextra/Caladea-Bold.ttf"),
}
FACES = (*STANDARD, *TRUETYPE)
FONT_ROOT = os.environ.get("OLMOCR_FONT_ROOT", "/usr/share/fonts/truetype")

_registered: dict[str, tuple[str, str]] = {}


def face(name: str) -> tuple[str, str]:
    """(regular, bold) font names reportlab knows, for the face ``name``."""
    if name in STANDARD:
        return STANDARD[name]
    if name in _registered:
        return _registered[name]
    if name not in TRUETYPE:
        raise UserError(f"typeface: expected one of {', '.join(FACES)}, got {name!r}")
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    package, *files = TRUETYPE[name]
    fonts = []
    for weight, file in zip(("", "-Bold"), files):
        path = os.path.join(FONT_ROOT, file)
        if not os.path.exists(path):
            raise UserError(f"typeface {name}: {path} is missing: install Debian's {package} "
                            f"('sudo apt-get install -y {package}', or bash scripts/setup.sh as root)")
        font = f"{name}{weight}"
        pdfmetrics.registerFont(TTFont(font, path))
        fonts.append(font)
    _registered[name] = (fonts[0], fonts[1])
    return _registered[name]
