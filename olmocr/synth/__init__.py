"""Synthetic pages: single-page PDFs of known layouts (columns, tables, equations, diagrams, rotated and blank
pages) in several languages, each with its ``.md`` truth and olmOCR-bench tests written from it
(``python -m olmocr.synth``), and the reading pages the reader learns from (lines of words, random letters,
paragraphs; :mod:`olmocr.synth.reading`)."""
