"""Training: optimizers, schedules, the loop, checkpoints and the ``python -m olmocr.train`` stage."""
