"""Batch conversion of PDF collections on any number of machines sharing one workspace (a local folder or
s3://bucket/prefix): the work index, exactly-once claims, results and done markers (workspace.py, queue.py),
the worker loop (worker.py), and what a worker does with an item (conf/work/)."""
