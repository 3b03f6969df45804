"""filter=olmocr decides as olmOCR's own PdfFilter does: the published olmocr 0.4.27 wheel's filter runs
in the same test on the same PDFs (English, German, French, Chinese, a fill-in form, download spam, a
scan without text, a page of numbers, a short page), and the pipeline counts what it drops by reason."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import zipfile

import pytest
from chat_server import ChatServer, good
from conftest import write_pdf
from PIL import Image

from olmocr.config import PROJECT_ROOT, compose
from olmocr.pipeline.filter import DocumentFilter

ENGLISH = ("The committee met on Tuesday to review the annual budget of the city library. Members agreed that "
           "the reading rooms need new lighting, and that the children's section should open earlier on "
           "weekends. The proposal will be presented to the council next month for a final decision.")
GERMAN = ("Der Ausschuss traf sich am Dienstag, um den Jahreshaushalt der Stadtbibliothek zu prüfen. Die "
          "Mitglieder waren sich einig, dass die Lesesäle eine neue Beleuchtung brauchen und dass die "
          "Kinderabteilung am Wochenende früher öffnen sollte. Der Vorschlag wird dem Rat vorgelegt.")
FRENCH = ("Le comité s'est réuni mardi pour examiner le budget annuel de la bibliothèque municipale. Les membres "
          "ont convenu que les salles de lecture ont besoin d'un nouvel éclairage et que la section jeunesse "
          "devrait ouvrir plus tôt le week-end. La proposition sera présentée au conseil le mois prochain.")
CHINESE = "委员会星期二开会审查了城市图书馆的年度预算。成员们一致认为阅览室需要新的照明，儿童区应该在周末提前开放。" * 8
SPAM = ("Download free PDF ebook now. Free download of the full book in PDF, EPUB and MOBI file formats. Save "
        "the file and read the ebook today. The best free ebook download site for every PDF file you need.")
NUMBERS = "2024 1.2 3.4 5.6 7.8 9.0 " * 40
WHEEL = os.path.join(PROJECT_ROOT, ".venv", "upstream")


def lines(text: str, width: int = 90) -> list[str]:
    out, line = [], ""
    for word in text.split(" "):
        if len(line) + len(word) + 1 > width:
            out.append(line)
            line = ""
        line = f"{line} {word}".strip()
    return out + [line]


def write_text_pdf(path: str, text: str, font: str = "Helvetica") -> str:
    from reportlab.lib.pagesizes import LETTER
    from reportlab.pdfgen.canvas import Canvas

    canvas = Canvas(path, pagesize=LETTER, invariant=1)
    if font == "STSong-Light":
        from reportlab.pdfbase import pdfmetrics
        from reportlab.pdfbase.cidfonts import UnicodeCIDFont

        pdfmetrics.registerFont(UnicodeCIDFont(font))
    canvas.setFont(font, 10)
    rows = [text[i:i + 30] for i in range(0, len(text), 30)] if font == "STSong-Light" else lines(text)
    for n, line in enumerate(rows):
        canvas.drawString(50, 740 - 14 * n, line)
    canvas.save()
    return path


def write_form(path: str) -> str:
    from reportlab.lib.pagesizes import LETTER
    from reportlab.pdfgen.canvas import Canvas

    canvas = Canvas(path, pagesize=LETTER)
    canvas.setFont("Helvetica", 10)
    for n, line in enumerate(lines(ENGLISH)):
        canvas.drawString(50, 740 - 14 * n, line)
    canvas.drawString(50, 600, "Name:")
    canvas.acroForm.textfield(name="name", x=100, y=590, width=200, height=20)
    canvas.save()
    return path


def write_scan(path: str, tmp) -> str:
    from reportlab.lib.pagesizes import LETTER
    from reportlab.pdfgen.canvas import Canvas

    image = os.path.join(tmp, "scan.png")
    Image.new("L", (600, 800), 230).save(image)
    canvas = Canvas(path, pagesize=LETTER)
    canvas.drawImage(image, 0, 0, width=LETTER[0], height=LETTER[1])
    canvas.save()
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, tuple[str, str | None]]:
    """PDF path → (name, the reason this project's filter drops it, or None when kept)."""
    tmp = str(tmp_path_factory.mktemp("filter"))
    made = {
        "english": (write_text_pdf(f"{tmp}/english.pdf", ENGLISH), None),
        "german": (write_text_pdf(f"{tmp}/german.pdf", GERMAN), "language"),
        "french": (write_text_pdf(f"{tmp}/french.pdf", FRENCH), "language"),
        "chinese": (write_text_pdf(f"{tmp}/chinese.pdf", CHINESE, "STSong-Light"), "language"),
        "form": (write_form(f"{tmp}/form.pdf"), "form"),
        "spam": (write_text_pdf(f"{tmp}/spam.pdf", SPAM), "spam"),
        "scan": (write_scan(f"{tmp}/scan.pdf", tmp), None),  # no text: kept on the safe side
        "numbers": (write_text_pdf(f"{tmp}/numbers.pdf", NUMBERS), None),  # mostly not letters: kept
        "short": (write_pdf(f"{tmp}/short.pdf", ["Ein kurzer Satz."]), None),  # too little text to judge: kept
    }
    return {path: (name, reason) for name, (path, reason) in made.items()}


# Upstream's filter, run from the published wheel in its own process: its module logs at import and would
# otherwise configure this one's logging. Its detector preloads every language model (13 s, 1.3 GB); the
# shim builds the same detector loading them on first use, which decides the same.
UPSTREAM = r"""
import json, sys, types
import lingua

class Builder:
    @staticmethod
    def from_all_languages():
        return Builder()
    def with_preloaded_language_models(self):
        return self
    def build(self):
        return lingua.LanguageDetectorBuilder.from_all_languages().build()

shim = types.ModuleType("lingua")
shim.Language, shim.LanguageDetectorBuilder = lingua.Language, Builder
sys.modules["lingua"] = shim
sys.path.insert(0, sys.argv[1])
from filter import PdfFilter, Language
decider = PdfFilter(languages_to_keep={Language.ENGLISH, None}, apply_download_spam_check=True, apply_form_check=True)
print(json.dumps({path: decider.filter_out_pdf(path) for path in sys.argv[2:]}))
"""


def upstream_decisions(paths: list[str], tmp_path) -> dict[str, bool]:
    wheels = glob.glob(os.path.join(WHEEL, "olmocr-0.4.27-*.whl"))
    assert wheels, f"no olmocr 0.4.27 wheel in {WHEEL}: run bash scripts/setup.sh --dev"
    with zipfile.ZipFile(wheels[0]) as wheel:
        (tmp_path / "filter.py").write_bytes(wheel.read("olmocr/filter/filter.py"))
    proc = subprocess.run([sys.executable, "-c", UPSTREAM, str(tmp_path), *paths], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_filter_decides_as_olmocrs_own(corpus, tmp_path):
    ours = DocumentFilter()
    decided = {path: ours(path, open(path, "rb").read()) for path in corpus}
    assert {corpus[p][0]: (why[0] if why else None) for p, why in decided.items()} == \
        {name: reason for name, reason in corpus.values()}
    assert decided[next(p for p in corpus if corpus[p][0] == "german")] == ("language", "de")
    upstream = upstream_decisions(sorted(corpus), tmp_path)
    assert {corpus[p][0]: upstream[p] for p in corpus} == {corpus[p][0]: decided[p] is not None for p in corpus}


def test_filtered_documents_cost_no_request_and_are_counted_by_reason(corpus, tmp_path):
    workspace = str(tmp_path / "ws")
    pdfs = sorted(corpus)
    with ChatServer([good("Read.")]) as server:
        from olmocr.pipeline.__main__ import run

        summary = run(compose("pipeline", [f"workspace={workspace}", "server=external", f"server.url={server.url}",
                                           "server.model_name=scripted", "work=ocr", "convert=default",
                                           "convert.steps.render.longest_side=100", "filter=olmocr", "workers=1",
                                           "progress=false", f"pdfs=[{','.join(pdfs)}]"]), str(tmp_path / "run"))
        assert len(server.requests) == 4  # english, scan, numbers, short: one page each
    counts = summary["work"]["counts"]
    assert (counts["documents"], counts["filtered_documents"]) == (4, 5)
    assert (counts["filtered_language"], counts["filtered_form"], counts["filtered_spam"]) == (3, 1, 1)
    listed = [json.loads(line) for path in glob.glob(f"{workspace}/filtered/*.jsonl") for line in open(path)]
    assert sorted((row["source"], row["reason"]) for row in listed) == \
        sorted((p, reason) for p, (_, reason) in corpus.items() if reason)
    from olmocr.pipeline.stats import describe, workspace_stats
    from olmocr.pipeline.workspace import Workspace

    text = describe(workspace_stats(Workspace(workspace)))
    assert "5 filtered (language 3, form 1, spam 1)" in text


def test_a_language_code_lingua_does_not_know_is_one_line():
    with pytest.raises(ValueError, match=r"filter.languages: 'XX' is not an ISO 639-1 code"):
        DocumentFilter(languages=["xx"])
