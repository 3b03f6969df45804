"""``GET /metrics``: the replica's figures in Prometheus's text format. What it answered and accepted, what its
own workers converted (pages by who gave the text, items by outcome, conversion time, model-server failures),
and the jobs waiting in the whole workspace (every replica's and batch run's), read when scraped."""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from olmocr.pipeline.failures import Cancelled, ServerFailed, StopWork, transient

log = logging.getLogger("olmocr.serve")
SECONDS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    def __init__(self, waiting=None):
        """``waiting()``: the number of jobs waiting for a worker, asked when scraped."""
        self.registry = registry = CollectorRegistry()  # the app's own: several apps may share a process
        self.submitted = Counter("olmocr_serve_jobs_submitted", "Jobs accepted, by how the document came "
                                 "(body, form, url; with _sync, through POST /v1/convert)", ["input"], registry=registry)
        self.answers = Counter("olmocr_serve_responses", "HTTP answers, by status code", ["code"], registry=registry)
        self.request_seconds = Histogram("olmocr_serve_request_seconds", "Time to answer a request, by endpoint",
                                         ["endpoint"], registry=registry)
        self.items = Counter("olmocr_serve_items", "Jobs (work items) this replica's workers finished, by outcome "
                             "(done, cancelled, failed: the item's own error, unavailable: outside it)", ["outcome"],
                             registry=registry)
        self.pages = Counter("olmocr_serve_pages", "Pages this replica's workers converted, by who gave the text "
                             "(model, fallback: the text layer)", ["by"], registry=registry)
        self.convert_seconds = Histogram("olmocr_serve_convert_seconds", "Time this replica's workers took to "
                                         "convert a job", buckets=SECONDS, registry=registry)
        self.refused_pages = Counter("olmocr_serve_pages_refused", "Pages the model server refused for what they are "
                                     "while it answered others (each is also a fallback page)", registry=registry)
        self.server_errors = Counter("olmocr_serve_model_server_errors", "Jobs sent back to the queue because "
                                     "the model server failed a page", registry=registry)
        if waiting is not None:
            Gauge("olmocr_serve_jobs_waiting", "Jobs in the workspace waiting for a worker (all replicas and batch "
                  "runs)", registry=registry).set_function(waiting)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def counting(self, process):
        """``process`` (a work item in, its Output out), counted."""
        def counted(item):
            began = time.monotonic()
            try:
                output = process(item)
            except Cancelled:
                self.items.labels("cancelled").inc()
                raise
            except StopWork:
                raise
            except Exception as exc:
                self.items.labels("unavailable" if transient(exc) else "failed").inc()
                if isinstance(exc, ServerFailed):
                    self.server_errors.inc()
                raise
            seconds = time.monotonic() - began
            self.items.labels("done").inc()
            self.convert_seconds.observe(seconds)
            fallback = output.counts.get("fallback_pages", 0)
            log.info("item %s converted in %.1f s: %d page(s), %d from the text layer", item.id, seconds,
                     output.counts.get("pages", 0), fallback)
            self.pages.labels("model").inc(output.counts.get("pages", 0) - fallback)
            self.pages.labels("fallback").inc(fallback)
            self.refused_pages.inc(output.counts.get("refused_pages", 0))
            return output

        return counted
