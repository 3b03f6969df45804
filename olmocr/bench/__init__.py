"""olmOCR-bench scoring of a folder of OCR outputs (``python -m olmocr.bench``): the test records and their checks
(text presence and absence, reading order, tables, equations rendered with KaTeX, baselines), scores per category
with bootstrap intervals, the HTML report, and a held-out bench split from your own pages
(``python -m olmocr.bench.split``). It scores text: it never imports a model."""
