"""Reports people look at: training curves as PNG, self-contained HTML pages (bench results, converted
documents) and their shared pieces."""
