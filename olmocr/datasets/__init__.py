"""The published datasets in the layouts the stages read (``python -m olmocr.datasets dataset=…``).

olmOCR-mix (parquet rows + PDF tarballs) becomes folders of ``X.pdf`` + ``X.md`` per subset and split, what
``data=olmocr_mix`` trains on; olmOCR-bench and olmOCR-synthmix become bench folders (test files and
``pdfs/``), what ``olmocr.bench`` scores and GRPO prompts from. Sources: the Hub at a pinned revision, a
local snapshot folder, or an ``s3://`` prefix holding one. Work is split into units (a tarball, a
subset/split) that are done once: a killed run continues, a second run over a complete folder changes
nothing, and what could not be converted is listed in ``<out>/.prepare/rejected.jsonl`` rather than stopping it.
"""
