"""python -m olmocr.report.viewer results=… — converted documents as a static site: an index and a page per document.

``results`` is a pipeline workspace (its ``results/*.jsonl``) or Dolma JSONL files (paths or globs; local
or s3://). Written to the run dir: ``index.html``, every document in a table (source, pages, pages from
the text layer, tokens) that a search box filters by name, then, for a workspace, every document it did not
convert (bad, dropped, filtered) with its reason, and any result line that is not a document
(cut short, edited) with its file and line number; ``docs/<key>.html`` per document, every page rendered
from the source PDF beside the text the pipeline extracted for it (markdown drawn: tables, equations), its
front-matter attributes, pages that fell back to the PDF's text layer marked, and where the model wrote blocks
(``page_blocks``: :mod:`olmocr.formats.structure`) each block's box drawn over the page image (turned as the model
read it), coloured by its label, its label and text shown on hover; ``pages/`` the page images as JPEG files,
named by source, page and turn (the documents of one PDF share them).

Any workspace size: documents stream from the JSONL one line at a time and each page is written as its
document goes by, so memory holds one document. A run into the same dir keeps the document pages and
images an earlier (interrupted) run wrote and writes the index again. Remote storage (the results, the
PDFs) that does not answer is waited out for up to ``storage_wait_s`` at each read, so a page is never
written (and kept) as unreadable because of an outage; past that, or on refused credentials, it stops in
one line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Iterator

from omegaconf import DictConfig

import olmocr.report.schema  # noqa: F401 - puts this stage's schema in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.errors import UserError

log = logging.getLogger("olmocr.report.viewer")
ATTRIBUTES = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram")
# A block's outline by its label (the key under the page image says which is which).
LABEL_COLOURS = {"title": "#d62728", "section_header": "#ff7f0e", "text": "#1f77b4", "list_item": "#17becf",
                 "caption": "#9467bd", "footnote": "#8c564b", "page_header": "#7f7f7f", "page_footer": "#7f7f7f",
                 "page_number": "#bcbd22", "table": "#2ca02c", "formula": "#e377c2", "figure": "#000000"}
# Filters the index's rows by the text typed (sources are in data-name, lower-cased; nothing is parsed as HTML).
SEARCH = """<script>
document.getElementById('search').addEventListener('input', function (event) {
  const query = event.target.value.trim().toLowerCase();
  let shown = 0;
  for (const row of document.querySelectorAll('tr[data-name]')) {
    const hit = !query || row.dataset.name.includes(query);
    row.hidden = !hit;
    shown += hit;
  }
  document.getElementById('shown').textContent = query ? shown + ' shown' : '';
});
</script>"""


def result_files(results: list[str], wait_s: float = 0.0) -> list[str]:
    """The JSONL files ``results`` names: a workspace's results/, files, globs."""
    from olmocr.utils.io import filesystem

    files = []
    for entry in results:
        if filesystem(entry, wait_s=wait_s).isdir(entry):
            found = _glob(entry, "results/*.jsonl", wait_s) or _glob(entry, "*.jsonl", wait_s)
        else:
            found = _glob(entry, wait_s=wait_s)
        if not found:
            raise UserError(f"results: {entry!r} names no Dolma JSONL (a workspace, a .jsonl file or a glob)")
        files += found
    return files


def _glob(entry: str, pattern: str | None = None, wait_s: float = 0.0) -> list[str]:
    """``entry`` (or ``pattern`` under it) globbed, sorted, as paths the I/O helpers open (s3:// kept)."""
    from olmocr.utils.io import filesystem, is_remote

    prefix = entry.split("://", 1)[0] + "://" if is_remote(entry) else ""
    found = filesystem(entry, wait_s=wait_s).glob(f"{entry.rstrip('/')}/{pattern}" if pattern else entry)
    return [prefix + f if prefix and not f.startswith(prefix) else f for f in sorted(found)]


def not_converted(results: list[str], wait_s: float = 0.0) -> Iterator[dict]:
    """The documents a workspace did not convert, from its bad/ and filtered/ lists (source, status,
    reason, detail); none for Dolma files named directly."""
    from olmocr.utils.io import filesystem, read_text

    for entry in results:
        if not filesystem(entry, wait_s=wait_s).isdir(entry):
            continue
        for folder in ("bad", "filtered"):
            for path in _glob(entry, f"{folder}/*.jsonl", wait_s):
                for number, line in enumerate(read_text(path, wait_s=wait_s).splitlines(), start=1):
                    try:
                        row = json.loads(line)
                        yield {key: str(row.get(key, folder if key == "status" else "")) for key in
                               ("source", "status", "reason", "detail")}
                    except (json.JSONDecodeError, AttributeError):
                        log.warning("%s:%d: not a line of the not-converted list; skipped", path, number)


def documents(files: list[str], wait_s: float = 0.0, unreadable: list[dict] | None = None) -> Iterator[dict]:
    """The documents of the Dolma files, one line at a time. A line that is not one (cut short by a kill or
    a disk, edited by hand) is skipped with a warning and, when ``unreadable`` is given, added to it as a
    row of the not-converted table; ``python -m olmocr.pipeline.repair`` puts its item back in the queue."""
    from olmocr.utils.io import open_text

    for path in files:
        with open_text(path, wait_s=wait_s) as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                    doc["text"], doc["attributes"]["pdf_page_numbers"], doc["metadata"]["Source-File"]
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    log.warning("%s:%d: not a Dolma document of the pipeline (%s); skipped", path, number, exc)
                    if unreadable is not None:
                        unreadable.append({"source": f"{path}:{number}", "status": "unreadable",
                                           "reason": "not_a_dolma_line", "detail": f"{type(exc).__name__}: {exc}"})
                    continue
                yield doc


def key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def write_once(path: str, data: bytes) -> None:
    """Whole or not at all: an interrupted run leaves no half page for the next run to keep."""
    with open(path + ".part", "wb") as fh:
        fh.write(data)
    os.replace(path + ".part", path)


def page_images(source: str, pages: list[int], longest_side: int, folder: str, wait_s: float = 0.0,
                turns: dict[int, int] | None = None) -> dict[int, str]:
    """An <img> of each page (files under ``folder``, rendered unless there already; turned clockwise by
    ``turns[page]`` degrees where given), or why it is missing (a source that is gone or refuses this user, said
    on the page; storage that does not answer is waited out for up to ``wait_s``, and refused credentials stop
    the run, :class:`olmocr.faults.Unreachable`)."""
    from olmocr.formats.html import esc, jpeg
    from olmocr.formats.pdf import PdfError
    from olmocr.formats.render import RenderError, render_page
    from olmocr.utils.io import read_bytes

    turns = turns or {}
    names = {page: f"{key(source)}_{page}{f'_t{turns[page]}' if turns.get(page) else ''}.jpg" for page in pages}
    out, data = {}, None
    for page, name in names.items():
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            try:
                data = read_bytes(source, wait_s=wait_s) if data is None else data
            except OSError as exc:
                return {p: f'<p class="fail">cannot read {esc(source)}: {esc(exc)}</p>' for p in pages}
            try:
                image = render_page(source, page, longest_side, data=data)
                if turns.get(page):  # PIL turns counter-clockwise
                    image = image.rotate(-turns[page], expand=True)
                write_once(path, jpeg(image, longest_side))
            except (RenderError, PdfError) as exc:
                out[page] = f'<p class="fail">cannot render page {page}: {esc(exc)}</p>'
                continue
        out[page] = f'<img alt="page {page}" src="../pages/{name}">'
    return out


def document_html(doc: dict, longest_side: int, pages_dir: str, wait_s: float = 0.0) -> str:
    from olmocr.formats.html import esc, markdown_html

    meta, attrs = doc["metadata"], doc["attributes"]
    spans = attrs["pdf_page_numbers"]
    fallback = attrs.get("is_fallback") or [None] * len(spans)
    blocks = [entry[2] for entry in attrs["page_blocks"]] if attrs.get("page_blocks") else [None] * len(spans)
    turns = {page: (b or {}).get("turned", 0) for (_, _, page), b in zip(spans, blocks)}
    images = page_images(meta["Source-File"], [page for _, _, page in spans], longest_side, pages_dir, wait_s, turns)
    header = (f"<p><a href='../index.html'>all documents</a></p><h1>{esc(meta['Source-File'])}</h1><p class='muted'>{meta.get('pdf-total-pages')} pages, "
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
                     f"<div><h3>page {page}</h3>{boxed(images[page], blocks[i])}</div><div>{note}<p class='muted'>{fields}</p>"
                     f'<div class="markdown">{markdown_html(text) if text.strip() else "<p class=muted>(no text)</p>"}'
                     f"</div></div></div>")
    return f'<section class="document" data-source="{esc(meta["Source-File"])}">{header}{"".join(pages)}</section>'


def boxed(image: str, structure: dict | None) -> str:
    """The page image with each block's box over it (positions in percent of the image: boxes are 0-1000 of it),
    its label and text in its title (shown on hover), and a key of the labels on the page."""
    from olmocr.formats.html import esc

    if not structure or not structure.get("blocks") or not image.startswith("<img"):
        return image
    boxes, labels = [], []
    for block in structure["blocks"]:
        x0, y0, x1, y1 = block["box"]
        colour = LABEL_COLOURS.get(block["label"], "#000")
        labels += [block["label"]] if block["label"] not in labels else []
        boxes.append(f'<div class="block" data-label="{esc(block["label"])}" title="{esc(block["label"])}: '
                     f'{esc(block["text"])}" style="left:{x0 / 10}%;top:{y0 / 10}%;width:{(x1 - x0) / 10}%;'
                     f'height:{(y1 - y0) / 10}%;border-color:{colour}"></div>')
    key_html = " ".join(f'<span style="color:{LABEL_COLOURS.get(label, "#000")}">■ {esc(label)}</span>' for label in labels)
    return (f'<div class="blocks" style="position:relative;display:inline-block;line-height:0">{image}'
            f'{"".join(boxes)}</div><p class="muted">{key_html}</p>')


def index_row(doc: dict, name: str) -> str:
    from olmocr.formats.html import esc

    meta, source = doc["metadata"], doc["metadata"]["Source-File"]
    return (f'<tr data-name="{esc(source.lower())}"><td><a href="docs/{name}">{esc(source)}</a></td>'
            f"<td>{meta.get('pdf-total-pages', '')}</td><td>{meta.get('total-fallback-pages', 0)}</td>"
            f"<td>{meta.get('total-input-tokens', 0)}</td><td>{meta.get('total-output-tokens', 0)}</td></tr>\n")


@stage("report_viewer")
def run(cfg: DictConfig, output_dir: str) -> str:
    from tqdm import tqdm

    from olmocr.formats.html import TAIL, document, esc, head
    from olmocr.utils.runinfo import write_run_info

    results = [cfg.results] if isinstance(cfg.results, str) else list(cfg.results)
    files = result_files(results, cfg.storage_wait_s)
    docs_dir, pages_dir = os.path.join(output_dir, "docs"), os.path.join(output_dir, "pages")
    os.makedirs(docs_dir, exist_ok=True)
    os.makedirs(pages_dir, exist_ok=True)
    index = os.path.join(output_dir, "index.html")
    shown = total = kept = 0
    skipped: Counter = Counter()
    with open(index + ".part", "w", encoding="utf-8") as out:
        out.write(head("Converted documents") + "<h1>Converted documents</h1><p class='muted'>from "
                  f"{len(files)} file(s): {esc(', '.join(files[:5]))}{' …' if len(files) > 5 else ''}</p>"
                  "<p><input id='search' type='search' placeholder='filter by name' size='60'> <span id='shown'>"
                  "</span></p>\n<table class='data' id='documents'><tr><th>source</th><th>pages</th><th>from the "
                  "text layer</th><th>input tokens</th><th>output tokens</th></tr>\n")
        unreadable: list[dict] = []
        for doc in tqdm(documents(files, cfg.storage_wait_s, unreadable), desc="documents", unit="doc"):
            total += 1
            if cfg.max_documents is not None and shown >= cfg.max_documents:
                continue  # counted, not shown
            shown += 1
            name = f"{key(str(doc.get('id')) + doc['metadata']['Source-File'])}.html"
            page = os.path.join(docs_dir, name)
            if os.path.exists(page):
                kept += 1
            else:
                html = document_html(doc, cfg.longest_side, pages_dir, cfg.storage_wait_s)
                write_once(page, document(doc["metadata"]["Source-File"], html).encode())
            out.write(index_row(doc, name))
        out.write("</table>\n<h2>Not converted</h2><table class='data' id='not-converted'><tr><th>source</th>"
                  "<th>status</th><th>reason</th><th>detail</th></tr>\n")
        for row in [*unreadable, *not_converted(results, cfg.storage_wait_s)]:
            skipped[f"{row['status']}: {row['reason']}"] += 1
            out.write(f'<tr data-name="{esc(row["source"].lower())}">' +
                      "".join(f"<td>{esc(row[k])}</td>" for k in ("source", "status", "reason", "detail")) + "</tr>\n")
        reasons = ", ".join(f"{esc(reason)} {n}" for reason, n in skipped.most_common()) or "none"
        out.write(f"</table>\n<p class='muted' id='summary'>{shown} of {total} documents shown; not converted: "
                  f"{sum(skipped.values())} ({reasons})</p>\n{SEARCH}{TAIL}")
    os.replace(index + ".part", index)
    log.info("%d of %d documents (%d pages kept from an earlier run), %d not converted: %s", shown, total, kept,
             sum(skipped.values()), index)
    write_run_info(output_dir, summary={"documents": shown, "total": total, "kept": kept,
                                        "not_converted": dict(skipped), "viewer": index})
    return index


if __name__ == "__main__":
    run.main()
