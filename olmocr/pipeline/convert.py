"""One page → its text: rendered and prompted by the configured data steps (the same step list that
built the model's training and GRPO prompts, so inference cannot drift from training), sent to the
model server, its answer parsed with the page front-matter parser.

An answer that is cut off at ``max_tokens``, that does not parse, or that an HTTP error replaced is a
failed attempt; the next one runs at the next temperature of the schedule. When the model says the page
is not upright, the image is turned by the correction it gives and sent again. After the last attempt
the page falls back to the PDF's own text layer, and is counted as such.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any

from PIL import Image

from olmocr.config import OneOf, Range, runtime
from olmocr.data.chain import build_pipeline
from olmocr.data.steps import BuildMessages, Reject
from olmocr.errors import UserError
from olmocr.formats.frontmatter import PageMeta, Reading, read_answer
from olmocr.formats.structure import page_record
from olmocr.formats.pdf import PdfError, text_layer
from olmocr.pipeline.client import ChatClient, Reply
from olmocr.pipeline.failures import StopWork, Unavailable
from olmocr.pipeline.server import Server

log = logging.getLogger("olmocr.pipeline")

# Attempt n runs at the n-th temperature: a little randomness gets a model out of a repetition loop.
TEMPERATURES = [0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0]
DIRECTIONS = ("clockwise", "counterclockwise")
# PIL's transposes turn counter-clockwise; these are the clockwise turns.
_CLOCKWISE = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_90}
FALLBACK_META = PageMeta(primary_language=None)
# convert.guided: the page format as a regular expression (the front matter exactly as training writes it,
# then any text), for servers that constrain decoding to one (vLLM's structured_outputs).
PAGE_REGEX = (r"---\nprimary_language: (?:[a-z]{2}|null)\nis_rotation_valid: (?:True|False)\n"
              r"rotation_correction: (?:0|90|180|270)\nis_table: (?:True|False)\nis_diagram: (?:True|False)\n"
              r"---(?:\n[\s\S]*)?")
# The start check's page: a small image of one flat colour, prompted by the steps like any page.
CHECK_PAGE_PX, CHECK_PAGE_COLOUR, CHECK_TOKENS = 64, (250, 250, 240), 8
# The start check's request is short: a server silent this long is said to be (with how long it is waited for).
CHECK_QUIET_S = 5.0
# Pages in a row that the server answered none of the requests for, after which it is the server's fault.
UNANSWERED_IN_A_ROW = 8
# Documents in a row with pages the server refused while it answered the check page (and no real page yet), after
# which the refusals are the server's.
CHECK_ONLY_DOCUMENTS = 3
# HTTP answers that a request's content can cause (a shape the server's processor refuses, a request too large or
# malformed for it): a page answered so, while the server answers others, is refused for itself. No route (404),
# a key refused (401, 403) and busy answers (429, 502-504) say nothing of the page.
PAGE_STATUSES = (400, 413, 422, 500)


def clockwise(degrees: int, direction: str) -> int:
    """A turn of ``degrees`` in ``direction`` as the clockwise turn it is (0, 90, 180, 270)."""
    return degrees % 360 if direction == "clockwise" else -degrees % 360


def turn(image: Image.Image, degrees: int, direction: str) -> Image.Image:
    """``image`` turned by ``degrees`` (0, 90, 180, 270) in ``direction``."""
    degrees = clockwise(degrees, direction)
    return image if degrees == 0 else image.transpose(_CLOCKWISE[degrees])


def png_data_url(image: Image.Image) -> str:
    # Lossless, so the server sees exactly the pixels training saw; the fastest zlib level, since the
    # bytes only cross a local network (and the pipeline must keep a GPU fed on a few cores).
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def chat_messages(messages: list[dict], image_url: str) -> list[dict]:
    """The steps' chat turn in OpenAI's form: the image part becomes an ``image_url`` part, in place."""
    out = []
    for message in messages:
        content = message["content"]
        if not isinstance(content, str):
            content = [{"type": "image_url", "image_url": {"url": image_url}} if part["type"] == "image" else part
                       for part in content]
        out.append({"role": message["role"], "content": content})
    return out


@dataclass
class PageResult:
    page: int
    text: str
    meta: PageMeta
    fallback: bool = False
    # Clockwise degrees the page image was turned for the reading kept (``meta`` describes that image): the
    # turn that makes the page upright when that reading found it so.
    turned: int = 0
    input_tokens: int = 0  # over every attempt: what the page cost
    output_tokens: int = 0
    attempts: list[dict] = field(default_factory=list)  # per attempt: temperature, rotation, outcome
    # The first attempt the server did not answer as a chat completion (an HTTP error, a refused model,
    # no answer in time), and whether any attempt was answered: a page with server_error and not
    # answered says nothing of the model, only of the server.
    server_error: str | None = None
    answered: bool = False
    # The HTTP status of each attempt the server failed (None: no answer at all, a dropped connection or timeout)
    server_statuses: list = field(default_factory=list)
    refused: bool = False  # the server refused this page while it answered others: the page's own failure
    last_sent: float = 0.0  # when its last attempt was sent (time.monotonic)
    # The page's blocks, where the model writes blocks (olmocr.formats.structure), and its size (points for a PDF
    # page, pixels for an image) that their boxes in page units are of
    blocks: list | None = None
    page_size: tuple[float, float] | None = None

    @property
    def server_fault(self) -> str | None:
        """The server's error when the page fell back and the server failed any of its attempts: the model
        did not get every attempt the schedule gives it, so the fallback says nothing of the model."""
        return self.server_error if self.fallback else None

    @property
    def asked(self) -> bool:
        """Was the server asked (not so for a page that could not be rendered)?"""
        return self.answered or self.server_error is not None

    @property
    def unanswered(self) -> str | None:
        """The server's error when it answered none of the page's requests."""
        return None if self.answered else self.server_error

    def record(self) -> dict:
        """The page as a JSON object (the per-page output)."""
        return {"page": self.page, "text": self.text, **self.meta.to_dict(), "fallback": self.fallback,
                "turned": self.turned, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "attempts": self.attempts, **({"refused_by_server": True} if self.refused else {}),
                **(self.structure() if self.blocks is not None else {})}

    def structure(self) -> dict:
        """The page's blocks as a user loads them: ``page_size``, ``turned`` (the clockwise turn of the page image
        the boxes are of: the page as the model read it) and ``blocks`` (order, label, box in 0-1000 and in page
        units, text)."""
        record = page_record(self.blocks, self.page_size or (1000.0, 1000.0))
        return {"page_size": record["page_size"], "turned": self.turned, "blocks": record["blocks"]}


def error_gist(error: str) -> str:
    """An HTTP-level error (a reply's) on one short line."""
    return " ".join(error.split())[:300]


class ServerWatch:
    """Tells a page the server did not answer (every request an HTTP error, a model it does not serve, no chat
    completion) apart from a server that stopped answering pages, for runs that record pages one by one and
    skip recorded pages when run again (bench mode, pairs). Now and then, such a page is the page's own (a
    request too large, an image the server chokes on) and is recorded as any failed page is; ``in_a_row`` of
    them with no answered page between (or a run none of whose pages were answered) is the server's: they are
    not recorded, so a re-run asks again, and the run stops (:class:`StopWork`) in one line. Until that is
    known a page is held: :meth:`settled` gives the pages now known to be recorded."""

    def __init__(self, server: Server, in_a_row: int = UNANSWERED_IN_A_ROW):
        self.server, self.in_a_row = server, in_a_row
        self.held: list = []
        self.error: str | None = None  # the first error of the pages held
        self.answered = False

    def settled(self, page, error: str | None) -> list:
        """``page`` (what the caller records), ``error`` its server error when no request of it was answered;
        the pages to record now."""
        if error is None:
            self.answered = True
            held, self.held = self.held, []
            return [*held, page]
        self.held.append(page)
        self.error = self.error or error
        if len(self.held) >= self.in_a_row:
            raise self._stop(f"the last {len(self.held)} pages")
        return []

    def finish(self) -> list:
        """At the end of the run: the pages still held, when the server answered others."""
        if self.held and not self.answered:
            raise self._stop(f"all {len(self.held)} pages")
        held, self.held = self.held, []
        return held

    def _stop(self, which: str) -> StopWork:
        server = self.server
        return StopWork(f"{server.name} at {server.url} answered no request for {which} (model {server.model}): "
                        f"{error_gist(self.error)}; they are not recorded")


def _leaves(error: BaseException):
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


async def all_of(coroutines) -> list:
    """Run concurrently; the results in order. When one fails the others are cancelled and its error is
    raised as itself (the one that stops the run first, if any), not wrapped in an exception group."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(coroutine) for coroutine in coroutines]
    except BaseExceptionGroup as errors:
        leaves = list(_leaves(errors))
        raise next((e for e in leaves if isinstance(e, StopWork)), leaves[0]) from None
    return [task.result() for task in tasks]


class EventLoop:
    """An asyncio loop on its own thread, so any number of threads (the queue's workers) share one
    client and one limit on pages in flight."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="pipeline-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@runtime("server", "log_dir")
class PageConverter:
    """Converts pages concurrently: at most ``concurrency`` pages are in flight (rendered image held,
    request out); renders run on ``render_threads`` threads (null: one per core). ``steps`` present the pages as the
    served model was trained to read them (the stage sets them from its folder: :mod:`olmocr.data.presented`).

    Used as a context manager: entering starts the server (its output in ``<log_dir>/server.log``) and
    the client; leaving stops both. :meth:`run` runs a coroutine on the converter's loop from any thread.
    """

    def __init__(self, server: Server, steps: dict[str, Any],
                 temperatures: Annotated[list[float], Range(at_least=0)] = TEMPERATURES,
                 max_tokens: Annotated[int, Range(at_least=1)] = 8000,
                 rotation_direction: Annotated[str, OneOf(*DIRECTIONS)] = "clockwise",
                 concurrency: Annotated[int, Range(at_least=1)] = 64,
                 timeout_s: Annotated[float, Range(above=0)] = 600.0, busy_s: Annotated[float, Range(above=0)] = 120.0,
                 render_threads: Annotated[int | None, Range(at_least=1, null="one per core")] = None,
                 guided: bool = False, furniture: bool = False, log_dir: str = "."):
        if not temperatures:
            raise UserError("convert.temperatures: give at least one (one attempt per temperature)")
        if guided and server.structured_outputs is False:
            raise UserError(f"convert.guided: {server.name} does not constrain decoding to a format "
                            "(structured outputs); use server=vllm, or convert.guided=false")
        self.steps = build_pipeline(steps)
        if not any(isinstance(step, BuildMessages) for step in self.steps.steps.values()):
            raise UserError("convert.steps: page conversion needs a 'messages' step (olmocr.data.steps.BuildMessages)")
        # What the model writes after its front matter follows from the prompt it is given (a model's record
        # names the prompt it was trained with): markdown, or blocks whose markdown is the page's text.
        self.answer = self.steps.answer
        self.furniture = furniture
        self.server = server
        self.client = ChatClient(server, timeout_s=timeout_s, concurrency=concurrency, busy_s=busy_s)
        self.temperatures = list(temperatures)
        self.max_tokens = max_tokens
        self.rotation_direction = rotation_direction
        self.render_threads = render_threads or os.cpu_count() or 1
        self.regex = PAGE_REGEX if guided else None
        self.log_dir = log_dir
        self.pool: ThreadPoolExecutor | None = None
        self._loop: EventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._probe_lock: asyncio.Lock | None = None
        # Evidence that the server answers pages: the last real page it answered (its chat turn), what it was last
        # asked to tell a refused page from a failing server (when, answered, whether a real page), and the
        # documents whose pages were judged refused on a check page alone since a real page was last answered.
        self._answered_page: list[dict] | None = None
        self._probed = (-float("inf"), False, False)
        self._answered_at = -float("inf")  # when the last request a real page was answered for was sent
        self._refused_documents: set[str] = set()

    def __enter__(self) -> PageConverter:
        self.server.start(os.path.join(self.log_dir, "server.log"))
        try:
            if self.regex is not None:
                self.server.check_structured_outputs(self.regex)
            self.pool = ThreadPoolExecutor(self.render_threads, thread_name_prefix="render")
            self._loop = EventLoop()
            self._loop.run(self.client.open())
            self._loop.run(self.check_page_request())
        except BaseException:
            self.__exit__(None, None, None)  # the server it started, stopped
            raise
        return self

    async def refuses_page(self, result: PageResult, document: str) -> bool:
        """Whether the server failed ``result``'s page (of ``document``) for what the page is: every attempt it
        failed was answered with a status a request's content can cause (PAGE_STATUSES), and it answers another
        page asked after this one's last attempt: a page answered since, the last real page it answered, sent
        again, or, before it has answered any, the check page. A check page says less (a server may answer a
        short check and no real page): on that evidence alone, only pages of fewer than CHECK_ONLY_DOCUMENTS
        documents in a row are judged refused for themselves; past that they are the server's."""
        statuses = result.server_statuses
        if result.server_fault is None or not statuses or not all(s in PAGE_STATUSES for s in statuses):
            return False
        answered, real = await self.answers_others(result.last_sent)
        if not answered:
            return False
        if not real:
            if document not in self._refused_documents and len(self._refused_documents) >= CHECK_ONLY_DOCUMENTS - 1:
                return False
            self._refused_documents.add(document)
        return True

    async def answers_others(self, since: float) -> tuple[bool, bool]:
        """Whether the server answers a page request asked after ``since`` (time.monotonic), and whether that was
        a real page: another page answered since then (no request needed), or the last it answered, sent again
        (else the check page). Pages that ask at once share one request: an answer to a request made after
        ``since`` serves them all."""
        if self._answered_at >= since:
            return True, True
        if self._probe_lock is None:  # made on the loop that uses it
            self._probe_lock = asyncio.Lock()
        async with self._probe_lock:
            asked, answered, real = self._probed
            if asked >= since:
                return answered, real
            asked, replay = time.monotonic(), self._answered_page
            try:
                if replay is None:
                    reply = await self._check_reply()
                else:
                    reply = await self.client.chat(replay, self.max_tokens, self.temperatures[0], regex=self.regex)
                answered = reply.error is None
            except Unavailable:
                answered = False
            self._probed = (asked, answered, replay is not None)
            return self._probed[1:]

    async def _check_reply(self) -> Reply:
        buffer = io.BytesIO()
        Image.new("RGB", (CHECK_PAGE_PX, CHECK_PAGE_PX), CHECK_PAGE_COLOUR).save(buffer, format="PNG")
        sample = {"pdf_path": "start-check.png", "page": 1, "image_bytes": buffer.getvalue(), "num_pages": 1,
                  "page_size": (CHECK_PAGE_PX, CHECK_PAGE_PX)}
        _, messages, url = await asyncio.get_running_loop().run_in_executor(self.pool, self._render, sample)
        return await self.client.chat(chat_messages(messages, url), CHECK_TOKENS, 0.0, regex=self.regex,
                                      quiet_s=CHECK_QUIET_S)

    async def check_page_request(self) -> None:
        """One page request before any work: a small page, the configured model name and prompt. A server
        that does not answer it with a chat completion (a wrong URL path, a model name it does not serve,
        a request it rejects) is one line here, not a failed attempt on every page of the queue. What the
        model writes is not judged: that is the pages' business."""
        try:
            reply = await self._check_reply()
        except Unavailable as exc:
            raise UserError(f"{self.server.name} at {self.server.url}: {exc}") from None
        if reply.error is not None:
            raise UserError(f"{self.server.name} at {self.server.url} does not answer page requests for model "
                            f"{self.server.model!r}: {error_gist(reply.error)}")

    def __exit__(self, *exc) -> None:
        try:
            if self._loop is not None:
                self._loop.run(self.client.close())
                self._loop.close()
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
        finally:
            self.server.stop()

    def run(self, coroutine):
        return self._loop.run(coroutine)

    def _render(self, sample: dict) -> tuple[Image.Image, list[dict], str]:
        sample = self.steps(sample)
        return sample["image"], sample["messages"], png_data_url(sample["image"])

    def _turned(self, image: Image.Image, rotation: int) -> str:
        return png_data_url(turn(image, rotation, self.rotation_direction))

    def judge(self, reply: Reply) -> Reading | str:
        """The answer's front matter and text, or why the attempt failed."""
        return reply.error or read_answer(reply.text, reply.finish_reason, self.max_tokens, self.answer,
                                          self.furniture)

    async def convert(self, sample: dict, fallback_path: str | None, data: bytes | None = None) -> PageResult:
        """``sample`` starts the steps (``pdf_path``, ``page``, and what the caller already knows of the
        document); ``fallback_path`` is the PDF read for the text layer when every attempt fails (None: an
        image, which has none)."""
        if self._slots is None:  # made on the loop that uses it
            self._slots = asyncio.Semaphore(self.client.concurrency)
        loop = asyncio.get_running_loop()
        page = sample.get("page", 1)
        result = PageResult(page=page, text="", meta=FALLBACK_META)
        async with self._slots:
            try:
                image, messages, url = await loop.run_in_executor(self.pool, self._render, sample)
            except Reject as exc:
                result.attempts.append({"outcome": f"not rendered: {exc}"})
                return await self._fall_back(result, fallback_path, data)
            rotation, answer, read_at = 0, None, 0
            for temperature in self.temperatures:
                turn_sent = chat_messages(messages, url)
                sent = result.last_sent = time.monotonic()
                reply = await self.client.chat(turn_sent, self.max_tokens, temperature, regex=self.regex)
                result.input_tokens += reply.input_tokens
                result.output_tokens += reply.output_tokens
                if reply.error is None:
                    result.answered = True
                    self._answered_page, self._refused_documents = turn_sent, set()
                    self._answered_at = sent
                else:
                    result.server_error = result.server_error or reply.error
                    result.server_statuses.append(reply.status)
                judged = self.judge(reply)
                attempt = {"temperature": temperature, "rotation": rotation}
                if reply.status is not None:
                    attempt["http_status"] = reply.status
                result.attempts.append(attempt)
                if isinstance(judged, str):
                    attempt["outcome"] = judged
                    continue
                answer, read_at = judged, rotation
                meta = judged[0]
                if meta.is_rotation_valid:
                    attempt["outcome"] = "ok"
                    break
                attempt["outcome"] = f"page not upright: rotation_correction {meta.rotation_correction}"
                rotation = (rotation + meta.rotation_correction) % 360
                url = await loop.run_in_executor(self.pool, self._turned, image, rotation)
            del image
        if answer is None:
            return await self._fall_back(result, fallback_path, data)
        # The last answer that parsed, even if the model still found the page turned: its text is the
        # model's reading, which beats the text layer.
        result.meta, result.text, result.blocks = answer
        result.page_size = sample.get("page_size")
        result.turned = clockwise(read_at, self.rotation_direction)
        return result

    async def sample(self, sample: dict, n: int, temperature: float,
                     seed: int | None = None) -> tuple[list[dict], list[Reply]]:
        """The page's chat turn (the steps' messages, image part as given by the steps) and ``n`` answers
        to it at ``temperature``, sent together (the k-th with the server's sampling seed ``seed + k``, when
        given); raises Reject when the page cannot be rendered."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.client.concurrency)
        loop = asyncio.get_running_loop()
        async with self._slots:
            _, messages, url = await loop.run_in_executor(self.pool, self._render, sample)
            replies = await asyncio.gather(*(self.client.chat(chat_messages(messages, url), self.max_tokens, temperature,
                                                              None if seed is None else seed + k, self.regex)
                                             for k in range(n)))
        return messages, list(replies)

    async def _fall_back(self, result: PageResult, path: str | None, data: bytes | None) -> PageResult:
        result.fallback = True
        if path is None:
            result.attempts.append({"outcome": "no text layer: an image"})
            return result
        try:
            result.text = await asyncio.get_running_loop().run_in_executor(
                self.pool, text_layer, path, result.page, data)
        except PdfError as exc:
            result.attempts.append({"outcome": f"no text layer: {exc}"})
        log.debug("page %d of %s: text layer after %d attempt(s)", result.page, path, len(result.attempts))
        return result
