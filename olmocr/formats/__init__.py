"""The formats every stage reads and writes: PDF pages and their images, page markdown with its front
matter, tables and equations inside page text, and self-contained HTML pages. Nothing here knows about
training, inference or scoring; every other package builds on it."""
