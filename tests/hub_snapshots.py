"""Miniature snapshots of the published datasets in their real layouts (file names, columns, both response
forms, tarballs of PDFs), built from the bundled sample pages, with the faults a real snapshot can hold."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile

from olmocr.config import PROJECT_ROOT
from olmocr.formats.frontmatter import parse_document

SAMPLE = os.path.join(PROJECT_ROOT, "data", "sample")
SUBSETS = ("00_documents", "01_books", "02_loc_transcripts", "03_national_archives")


def sample_pages() -> list[tuple[str, bytes, dict, str]]:
    """(stem, pdf bytes, front matter fields, text) of the bundled training pages."""
    folder = os.path.join(SAMPLE, "train", "pdfs")
    pages = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".md"):
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                meta, text = parse_document(fh.read())
            with open(os.path.join(folder, name[:-3] + ".pdf"), "rb") as fh:
                pages.append((name[:-3], fh.read(), meta.to_dict(), text))
    return pages


def _tarball(path: str, members: dict[str, bytes]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def mix_1025(root: str, rows: int = 2, tarballs: int = 1) -> dict:
    """olmOCR-mix-1025's layout: ``<subset>_<split>.parquet`` + ``pdf_tarballs/<subset>_<split>_NNNNN.tar.gz``.
    Books are in the JSON ``response`` form, the others in the column form. Faults, in 00_documents/train:
    a row without its PDF, a PDF without a row, a rotation of 45; in 01_books/train: a response that is not
    JSON. Returns {part: {id: (pdf bytes, fields, text, url)}} of the good rows."""
    import pandas as pd

    os.makedirs(root, exist_ok=True)
    pages = sample_pages()
    good: dict[str, dict] = {}
    n = 0
    for subset in SUBSETS:
        for split in ("train", "eval"):
            key, records, members = f"{subset}/{split}", [], {}
            good[key] = {}
            for k in range(rows):
                stem, pdf, fields, text = pages[n % len(pages)]
                n += 1
                # ids as the release has them: some with a folder part
                pid = f"{stem}-{k}" if subset != "01_books" else f"book{k:02d}/{stem}-1"
                chunk = f"{subset}_{split}_{k % tarballs:05d}.tar.gz"
                url = f"https://example.org/{stem}.pdf"
                records.append((pid, fields, text or None, url, chunk))
                members.setdefault(chunk, {})[f"{pid}.pdf"] = pdf
                good[key][pid] = (pdf, fields, text, url)
            if key == "00_documents/train":
                stem, pdf, fields, text = pages[0]
                records.append(("no-pdf-here", fields, text, None, f"{subset}_{split}_00000.tar.gz"))
                records.append(("tilted", {**fields, "rotation_correction": 45}, text, None, f"{subset}_{split}_00000.tar.gz"))
                members[f"{subset}_{split}_00000.tar.gz"]["tilted.pdf"] = pdf
                members[f"{subset}_{split}_00000.tar.gz"]["orphan.pdf"] = pdf
            if key == "01_books/train":
                stem, pdf, fields, text = pages[1]
                records.append(("book99/broken-1", None, None, None, f"{subset}_{split}_00000.tar.gz"))
                members[f"{subset}_{split}_00000.tar.gz"]["book99/broken-1.pdf"] = pdf
            if subset == "01_books":
                frame = pd.DataFrame({
                    "url": [r[3] for r in records], "page_number": [1] * len(records),
                    "response": [json.dumps({**r[1], "natural_text": r[2]}) if r[1] else "{not json"
                                 for r in records],
                }, index=[r[0] for r in records])
            else:
                frame = pd.DataFrame({
                    "url": [r[3] for r in records], "page_number": [1] * len(records),
                    "pdf_relpath": [f"pdf_tarballs/{r[4]}:{r[0]}.pdf" for r in records],
                    **{f: [r[1][f] for r in records] for f in records[0][1]},
                    "natural_text": [r[2] for r in records],
                    "extras": [json.dumps({"source": "sample"}) for _ in records],
                }, index=[r[0] for r in records])
            frame.index.name = "id"
            frame.to_parquet(os.path.join(root, f"{subset}_{split}.parquet"))
            for chunk, files in members.items():
                _tarball(os.path.join(root, "pdf_tarballs", chunk), files)
    with open(os.path.join(root, "README.md"), "w") as fh:
        fh.write("---\nlicense: odc-by\n---\n")
    return good


def bench(root: str, references: bool = False) -> dict:
    """olmOCR-bench's layout (``bench_data/<file>.jsonl`` + ``bench_data/pdfs/…``) from the bundled eval
    bench, plus a test naming a PDF that is not there and a malformed line. With ``references`` it is
    synthmix's: PDFs under a folder, reference pages in ``bench_data/claude_original/…``, one of them with
    broken front matter. Returns the number of pages whose tests can run."""
    src = os.path.join(SAMPLE, "eval")
    folder = "general/" if references else ""
    os.makedirs(os.path.join(root, "bench_data", "pdfs", folder), exist_ok=True)
    lines, pdfs = [], []
    with open(os.path.join(src, "synth.jsonl")) as fh:
        for line in fh:
            test = json.loads(line)
            if test["pdf"] not in pdfs:
                pdfs.append(test["pdf"])
            test["pdf"] = folder + test["pdf"]
            lines.append(json.dumps(test))
    lines.append(json.dumps({"type": "present", "pdf": folder + "gone.pdf", "page": 1, "id": "gone_00", "text": "x"}))
    lines.append('{"type": "present", "pdf": ')
    with open(os.path.join(root, "bench_data", "synth.jsonl"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    for i, pdf in enumerate(pdfs):
        shutil.copy(os.path.join(src, "pdfs", pdf), os.path.join(root, "bench_data", "pdfs", folder, pdf))
        if references:
            ref = os.path.join(root, "bench_data", "claude_original", "general", pdf[:-4] + "_pg1_repeat1.md")
            os.makedirs(os.path.dirname(ref), exist_ok=True)
            with open(os.path.join(src, "pdfs", pdf[:-4] + ".md")) as fh:
                text = fh.read()
            with open(ref, "w") as fh:
                fh.write(re.sub(r"is_table: \w+", "is_table: maybe", text) if i == 0 else text)
    return len(pdfs)
