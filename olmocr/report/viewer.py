"""python -m olmocr.report.viewer results=… — converted documents as one self-contained HTML page.

``results`` is a pipeline workspace (its ``results/*.jsonl``) or Dolma JSONL files (paths or globs; local
or s3://). Per document: its source and counts, then every page rendered from the source PDF beside the
text the pipeline extracted for it (markdown drawn: tables, equations), its front-matter attributes, and
pages that fell back to the PDF's text layer marked; for a workspace, the documents it did not convert
(bad, dropped, filtered), each with its reason. Writes ``viewer.html`` to the run dir.
"""

from __future__ import annotations

import json
import logging
import os

from omegaconf import DictConfig

import olmocr.report.schema  # noqa: F401 - puts this stage's schema in Hydra's ConfigStore
from olmocr.cli import stage

log = logging.getLogger("olmocr.report.viewer")
ATTRIBUTES = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram")


def result_files(results: list[str]) -> list[str]:
    """The JSONL files ``results`` names: a workspace's results/, files, globs."""
    from olmocr.utils.io import filesystem

    files = []
    for entry in results:
        if filesystem(entry).isdir(entry):
            found = _glob(entry, "results/*.jsonl") or _glob(entry, "*.jsonl")
        else:
            found = _glob(entry)
        if not found:
            raise ValueError(f"results: {entry!r} names no Dolma JSONL (a workspace, a .jsonl file or a glob)")
        files += found
    return files


def _glob(entry: str, pattern: str | None = None) -> list[str]:
    """``entry`` (or ``pattern`` under it) globbed, sorted, as paths the I/O helpers open (s3:// kept)."""
    from olmocr.utils.io import filesystem, is_remote

    prefix = entry.split("://", 1)[0] + "://" if is_remote(entry) else ""
    found = filesystem(entry).glob(f"{entry.rstrip('/')}/{pattern}" if pattern else entry)
    return [prefix + f if prefix and not f.startswith(prefix) else f for f in sorted(found)]


def not_converted(results: list[str]) -> list[dict]:
    """The documents a workspace did not convert, from its bad/ and filtered/ lists (source, status,
    reason, detail); none for Dolma files named directly."""
    from olmocr.utils.io import filesystem, read_text

    rows = []
    for entry in results:
        if not filesystem(entry).isdir(entry):
            continue
        for folder in ("bad", "filtered"):
            for path in _glob(entry, f"{folder}/*.jsonl"):
                for number, line in enumerate(read_text(path).splitlines(), start=1):
                    try:
                        row = json.loads(line)
                        rows.append({key: str(row.get(key, folder if key == "status" else "")) for key in
                                     ("source", "status", "reason", "detail")})
                    except (json.JSONDecodeError, AttributeError):
                        log.warning("%s:%d: not a line of the not-converted list; skipped", path, number)
    return rows


def not_converted_html(rows: list[dict], limit: int) -> str:
    from collections import Counter

    from olmocr.formats.html import esc

    if not rows:
        return ""
    reasons = Counter(f"{row['status']}: {row['reason']}" for row in rows)
    summary = ", ".join(f"{esc(reason)} {n}" for reason, n in reasons.most_common())
    cells = "".join(f"<tr><td>{esc(row['source'])}</td><td>{esc(row['status'])}</td><td>{esc(row['reason'])}</td>"
                    f"<td>{esc(row['detail'])}</td></tr>" for row in rows[:limit])
    more = f"<p class='muted'>…and {len(rows) - limit} more</p>" if len(rows) > limit else ""
    return (f"<section class='not-converted'><h2>Not converted: {len(rows)} documents</h2><p class='muted'>"
            f"{summary}</p><table><tr><th>source</th><th>status</th><th>reason</th><th>detail</th></tr>{cells}"
            f"</table>{more}</section>")


def read_documents(files: list[str], limit: int) -> tuple[list[dict], int]:
    """Up to ``limit`` documents, and how many there are in all."""
    from olmocr.utils.io import read_text

    documents, total = [], 0
    for path in files:
        for number, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                doc["text"], doc["attributes"]["pdf_page_numbers"], doc["metadata"]["Source-File"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a Dolma document of the pipeline ({exc})") from None
            total += 1
            if len(documents) < limit:
                documents.append(doc)
    return documents, total


def _page_images(source: str, pages: list[int], longest_side: int) -> dict[int, str]:
    from olmocr.formats.html import esc, image_data_url
    from olmocr.formats.pdf import PdfError
    from olmocr.formats.render import RenderError, render_page
    from olmocr.utils.io import read_bytes

    try:
        data = read_bytes(source)
    except OSError as exc:
        return {p: f'<p class="fail">cannot read {esc(source)}: {esc(exc)}</p>' for p in pages}
    out = {}
    for page in pages:
        try:
            image = render_page(source, page, longest_side, data=data)
            out[page] = f'<img alt="page {page}" src="{image_data_url(image, longest_side)}">'
        except (RenderError, PdfError) as exc:
            out[page] = f'<p class="fail">cannot render page {page}: {esc(exc)}</p>'
    return out


def document_html(doc: dict, index: int, longest_side: int) -> str:
    from olmocr.formats.html import esc, markdown_html

    meta, attrs = doc["metadata"], doc["attributes"]
    spans = attrs["pdf_page_numbers"]
    fallback = attrs.get("is_fallback") or [None] * len(spans)
    images = _page_images(meta["Source-File"], [page for _, _, page in spans], longest_side)
    header = (f"<h2>{index}. {esc(meta['Source-File'])}</h2><p class='muted'>{meta.get('pdf-total-pages')} pages, "
              f"{meta.get('total-fallback-pages', 0)} from the text layer, {meta.get('total-input-tokens', 0)} input "
              f"and {meta.get('total-output-tokens', 0)} output tokens; model {esc(meta.get('model', '?'))}; "
              f"id {esc(doc.get('id'))}</p>")
    pages = []
    for i, (begin, end, page) in enumerate(spans):
        fields = ", ".join(f"{name} {esc(attrs[name][i])}" for name in ATTRIBUTES
                           if isinstance(attrs.get(name), list) and i < len(attrs[name]))
        marked = fallback[i] is True
        note = '<p class="badge fail">text layer (the model gave no usable answer)</p>' if marked else ""
        text = doc["text"][begin:end]
        pages.append(f'<div class="page pair{" fallback" if marked else ""}" data-page="{page}">'
                     f"<div><h3>page {page}</h3>{images[page]}</div><div>{note}<p class='muted'>{fields}</p>"
                     f'<div class="markdown">{markdown_html(text) if text.strip() else "<p class=muted>(no text)</p>"}'
                     f"</div></div></div>")
    return f'<section class="document" data-source="{esc(meta["Source-File"])}">{header}{"".join(pages)}</section>'


@stage("report_viewer")
def run(cfg: DictConfig, output_dir: str) -> str:
    from tqdm import tqdm

    from olmocr.formats.html import document, esc
    from olmocr.utils.runinfo import write_run_info

    if cfg.max_documents < 1:
        raise ValueError(f"max_documents: must be at least 1, got {cfg.max_documents}")
    results = [cfg.results] if isinstance(cfg.results, str) else list(cfg.results)
    files = result_files(results)
    documents, total = read_documents(files, cfg.max_documents)
    skipped = not_converted(results)
    body = [f"<h1>Converted documents</h1><p class='muted'>{len(documents)} of {total} documents from "
            f"{len(files)} file(s): {esc(', '.join(files[:5]))}{' …' if len(files) > 5 else ''}</p>",
            not_converted_html(skipped, cfg.max_documents)]
    for i, doc in enumerate(tqdm(documents, desc="documents", unit="doc"), start=1):
        body.append(document_html(doc, i, cfg.longest_side))
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "viewer.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(document("Converted documents", "\n".join(body)))
    log.info("%d of %d documents: %s", len(documents), total, path)
    write_run_info(output_dir, summary={"documents": len(documents), "total": total, "not_converted": len(skipped),
                                        "viewer": path})
    return path


if __name__ == "__main__":
    run.main()
