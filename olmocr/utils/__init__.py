"""What every layer above uses and no OCR concept is in: file and S3 access that waits out storage that does not
answer, run info (git revision, versions, command), run dirs pushed to and restored from object storage,
resumable JSON-lines files, and where vLLM's CPU build needs settings its GPU build does not."""
