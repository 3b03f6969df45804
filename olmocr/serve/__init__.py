"""``python -m olmocr.serve``: conversion over HTTP, a front over the batch pipeline's workspace and queue."""
