"""Page data: front matter, rendering, per-sample steps, dataset index and datasets."""
