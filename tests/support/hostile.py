"""Hostile and careless documents for the service's tests and benchmarks/serve_load.py: small uploads that once
stopped it or grew it (page trees nested or lying, pages of no size or a sliver's, archives whose members cannot be
stored, repeat a name, are links or devices, or unpack to far more than they weigh)."""

from __future__ import annotations

import gzip
import io
import tarfile


def raw_pdf(objects: list[bytes], root: int = 1) -> bytes:
    """A PDF of ``objects`` (object n is ``objects[n - 1]``), with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, root, xref)
    return bytes(out)


def page_pdf(media_box: str, text: str = "A line on a page") -> bytes:
    """One page with ``media_box`` ("0 0 612 792") and a line of text."""
    content = b"BT /F1 12 Tf 10 10 Td (%s) Tj ET" % text.encode()
    return raw_pdf([b"<< /Type /Catalog /Pages 2 0 R >>",
                    b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                    b"<< /Type /Page /Parent 2 0 R /MediaBox [%s] /Contents 4 0 R "
                    b"/Resources << /Font << /F1 5 0 R >> >> >>" % media_box.encode(),
                    b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
                    b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"])


def sliver_pdf(width: float = 200000, height: float = 1) -> bytes:
    return page_pdf(f"0 0 {width:g} {height:g}")


def zero_pdf() -> bytes:
    return page_pdf("0 0 0 0")


def deep_tree_pdf(depth: int = 150) -> bytes:
    """A page tree of ``depth`` nested /Pages nodes above its one page."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        number = 2 + level
        parent = b" /Parent %d 0 R" % (number - 1) if level else b""
        objects.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1%s >>" % (number + 1, parent))
    objects.append(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] >>" % (1 + depth))
    return raw_pdf(objects)


def lying_count_pdf(count: int = 10**9) -> bytes:
    """One page whose page tree says it has ``count``."""
    return raw_pdf([b"<< /Type /Catalog /Pages 2 0 R >>",
                    b"<< /Type /Pages /Kids [3 0 R] /Count %d >>" % count,
                    b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"])


def tar_of(members: list[tarfile.TarInfo | tuple[str, bytes]], gz: bool = True) -> bytes:
    """A tar (gzipped with ``gz``) of ``members``: (name, bytes) for a file, or a TarInfo as it is."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if gz else "w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                name, data = member
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def links_and_devices_tar(document: bytes) -> bytes:
    """A document beside a symbolic link, a hard link, a FIFO and a character device."""
    return tar_of([("doc.pdf", document), special("to-passwd", tarfile.SYMTYPE, "/etc/passwd"),
                   special("hard", tarfile.LNKTYPE, "doc.pdf"), special("pipe", tarfile.FIFOTYPE),
                   special("null", tarfile.CHRTYPE)])


def folder_bomb_tgz(entries: int = 200_000) -> bytes:
    """A gzipped tar of ``entries`` empty folders (under a megabyte), then one document."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz:
        for n in range(entries):
            info = tarfile.TarInfo(f"d{n}")
            info.type = tarfile.DIRTYPE
            gz.write(info.tobuf(tarfile.USTAR_FORMAT))
        gz.write(b"\0" * 1024)
    return out.getvalue()


def zeros_member_tgz(size: int = 2**30, name: str = "big.pdf") -> bytes:
    """A gzipped tar whose one member is ``size`` bytes of a PDF header and zeros (about a megabyte a GiB)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz:
        info = tarfile.TarInfo(name)
        info.size = size
        gz.write(info.tobuf(tarfile.USTAR_FORMAT))
        gz.write(b"%PDF-1.4\n")
        chunk = b"\0" * 2**20
        left = size - 9
        while left > 0:
            gz.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)
        gz.write(b"\0" * (-size % 512) + b"\0" * 1024)
    return out.getvalue()


def deep_json(depth: int = 60_000) -> bytes:
    return b"[" * depth
