"""Bench releases (olmOCR-bench, olmOCR-synthmix): test files + PDFs → a bench folder ``<out>/*.jsonl`` +
``<out>/pdfs/…``, what ``olmocr.bench bench_dir=`` scores and GRPO (``data=synthmix``) prompts from.

A test file is copied byte for byte (so scores match those on the release itself), or, with ``limit``,
cut to the tests of its first ``limit`` pages. Only the PDFs its tests name are fetched. A release with
reference pages (synthmix's ``claude_original``) gets each one beside its PDF as ``<pdf stem>.md``, where
reference-based rewards look for it, after its front matter is checked. Each test file is one unit of work;
at its end its tests are parsed and every page they name is opened, and problems are listed.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm

from olmocr.datasets.files import Source, State, covers, safe_relative, write_atomic
from olmocr.errors import UserError

log = logging.getLogger("olmocr.datasets")


class BenchRelease:
    """One bench release on the Hub: ``folder`` holds its test files (``*.jsonl``) and ``pdfs/``;
    ``references`` is where a page's reference markdown is, from ``{dir}`` (the PDF's folder under pdfs/)
    and ``{stem}`` (its name without .pdf), or null when the release has none."""

    def __init__(self, repo_id: str, revision: str, folder: str = "bench_data", references: str | None = None):
        self.repo_id, self.revision, self.folder, self.references = repo_id, revision, folder.strip("/"), references

    def prepare(self, source: Source, out: str, subsets: list[str] | None, splits: list[str] | None,
                limit: int | None, workers: int) -> dict:
        if splits:
            raise UserError(f"splits: {self.repo_id} has no splits; choose test files with subsets=[…]")
        state = State(out)
        # The release's test files, as listed by the first run: a re-run over a finished folder needs no source.
        known = state.done("listing")
        if known is None:
            snapshot = source.fetch([f"{self.folder}/*.jsonl"])
            files = {os.path.basename(rel)[:-6]: rel for rel in snapshot.glob(f"{self.folder}/*.jsonl")}
            if not files:
                raise UserError(f"{snapshot.root}: no test files {self.folder}/*.jsonl; is it a snapshot of {self.repo_id}?")
            state.finish("listing", {"files": files}, [])
        else:
            files = known["files"]
        for name in subsets or []:
            if name not in files:
                raise UserError(f"subsets: {self.repo_id} has no test file {name!r} (it has {', '.join(sorted(files))})")
        results = {}
        for name in sorted(subsets or files):
            done = state.done(f"tests/{name}")
            if done and covers(done["limit"], limit):
                log.info("%s: done before (%d pages), left as it is", name, done["pages"])
                results[name] = done
                continue
            results[name] = self._prepare_file(source, state, name, files[name], out, limit, workers)
        return results

    def _prepare_file(self, source: Source, state: State, name: str, rel: str, out: str,
                      limit: int | None, workers: int) -> dict:
        from olmocr.bench.records import parse_test

        raw = source.fetch([rel]).read(rel)
        rejected, order, kept_lines = [], [], []
        for number, line in enumerate(raw.decode("utf-8").splitlines(keepends=True), start=1):
            if not line.strip():
                continue
            try:
                test = parse_test(json.loads(line), [])
            except (ValueError, TypeError) as exc:
                rejected.append({"reason": "malformed_test", "id": f"{rel}:{number}", "detail": str(exc)})
                kept_lines.append((None, line))
                continue
            if test.pdf not in order:
                order.append(test.pdf)
            kept_lines.append((test.pdf, line))
        pdfs = order[:limit] if limit is not None else order
        chosen = set(pdfs)
        text = raw if limit is None else "".join(
            line for pdf, line in kept_lines if pdf in chosen).encode("utf-8")
        names = {pdf: safe_relative(pdf) for pdf in pdfs}
        for pdf, safe in names.items():
            if safe is None:
                rejected.append({"reason": "bad_pdf_name", "id": pdf, "detail": f"{rel}: pdf {pdf!r} is not a relative path"})
        wanted = [pdf for pdf in pdfs if names[pdf]]
        patterns = [f"{self.folder}/pdfs/{pdf}" for pdf in wanted]
        if self.references:
            patterns += [self._reference(pdf) for pdf in wanted]
        snapshot = source.fetch(patterns)

        def copy(pdf: str) -> tuple[int, list[dict]]:
            problems, size = [], 0
            src = f"{self.folder}/pdfs/{pdf}"
            if not snapshot.exists(src):
                return 0, [{"reason": "missing_pdf", "id": pdf, "detail": f"{rel} names {pdf}, not in {self.folder}/pdfs/"}]
            data = snapshot.read(src)
            write_atomic(os.path.join(out, "pdfs", pdf), data)
            size += len(data)
            if self.references:
                size_ref, problem = self._copy_reference(snapshot, out, pdf)
                size += size_ref
                problems += [problem] if problem else []
            return size, problems

        size = 0
        with ThreadPoolExecutor(max(1, workers)) as pool, tqdm(total=len(wanted), desc=name, unit="pdf") as bar:
            for copied, problems in pool.map(copy, wanted):
                size += copied
                rejected += problems
                bar.update(1)
        path = os.path.join(out, f"{name}.jsonl")
        write_atomic(path, text)
        pages, unreadable = check_bench_file(path, out, workers)
        rejected += unreadable
        for r in rejected:
            r["subset"] = name
        return state.finish_part(f"tests/{name}", name, limit, pages, size + len(text), rejected)

    def _reference(self, pdf: str) -> str:
        folder, stem = os.path.dirname(pdf), os.path.basename(pdf)[:-4]
        return f"{self.folder}/" + self.references.format(dir=folder, stem=stem).lstrip("/").replace("//", "/")

    def _copy_reference(self, snapshot, out: str, pdf: str) -> tuple[int, dict | None]:
        from olmocr.formats.frontmatter import FrontMatterError, parse_document

        src = self._reference(pdf)
        if not snapshot.exists(src):
            return 0, {"reason": "no_reference", "id": pdf, "detail": f"no {src}: rewards get no reference page"}
        data = snapshot.read(src)
        try:
            parse_document(data.decode("utf-8"))
        except (FrontMatterError, UnicodeDecodeError) as exc:
            return 0, {"reason": "bad_reference", "id": pdf, "detail": f"{src}: {exc}"}
        write_atomic(os.path.join(out, "pdfs", pdf[:-4] + ".md"), data)
        return len(data), None


def check_bench_file(path: str, root: str, workers: int) -> tuple[int, list[dict]]:
    """What ``olmocr.bench`` and GRPO's bench prompts read of a test file: every page its tests name must
    open. Returns (pages that do, problems)."""
    from olmocr.bench.records import load_tests
    from olmocr.data.steps import CheckPdf, Reject

    loaded = load_tests(path)
    pages = sorted({(t.pdf, t.page) for t in loaded.tests})
    check = CheckPdf(max_pages=None)

    def opens(page) -> dict | None:
        pdf, number = page
        try:
            check({"pdf_path": os.path.join(root, "pdfs", pdf), "page": number})
        except Reject as exc:
            return {"reason": exc.reason, "id": f"{pdf}#{number}", "detail": exc.detail}
        return None

    with ThreadPoolExecutor(max(1, workers)) as pool:
        problems = [p for p in pool.map(opens, pages) if p is not None]
    # A PDF missing from the release was listed when it was fetched.
    return len(pages) - len(problems), [p for p in problems if p["reason"] != "missing_pdf"]
