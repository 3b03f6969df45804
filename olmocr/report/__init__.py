"""Reports people look at: training curves as PNG and converted documents as one HTML page."""
