"""One asynchronous client of an OpenAI-compatible chat endpoint, shared by every page in flight."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass

import httpx

from olmocr.pipeline.failures import Unavailable
from olmocr.pipeline.server import Server

log = logging.getLogger("olmocr.pipeline")
# One line per request at INFO would bury the progress bar and the warnings that matter.
logging.getLogger("httpx").setLevel(logging.WARNING)

# What a request that never reached the server (or whose connection the server dropped) raises: the
# server may be restarting, so the page waits and tries again rather than spending an attempt.
UNREACHABLE = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError,
               httpx.ConnectTimeout, httpx.PoolTimeout)

MAX_DROPS = 4  # a request whose connection drops this often while the server stays up is a failed attempt
# Answers that say the server is busy or its gateway is down, not that the page is at fault: the request
# waits and goes again; a server busy for busy_s gives the whole item back to the queue.
BUSY = (429, 502, 503, 504)
# Answers that say the request is not allowed: the API key (server.api_key_env), not the page.
REFUSED = (401, 403)


@dataclass
class Reply:
    """One answer: ``error`` says why it is unusable at the HTTP level (None when it is usable)."""

    text: str = ""
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    status: int | None = None  # the HTTP status of an answer that was not a chat completion


# A server that has answered nothing for this long while requests wait is said to (at most once this often).
QUIET_S = 60.0


class ChatClient:
    def __init__(self, server: Server, timeout_s: float, concurrency: int, busy_s: float = 120.0):
        self.server = server
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self.busy_s = busy_s
        self._client: httpx.AsyncClient | None = None
        self._heard = self._said = time.monotonic()  # the last answer (of any kind), the last word of a quiet server
        self._waiting = 0  # requests out

    def _quiet(self, quiet_s: float) -> None:
        """Say once, when requests have waited ``quiet_s`` with no answer at all, what they wait for and how long."""
        now = time.monotonic()
        if self._waiting and now - self._heard >= quiet_s and now - self._said >= quiet_s:
            self._said = now
            log.warning("%s at %s has answered nothing for %.0f s (%d request(s) waiting, model %s); each waits up to "
                        "%.0f s (convert.timeout_s)", self.server.name, self.server.url, now - self._heard,
                        self._waiting, self.server.model, self.timeout_s)

    async def _post(self, body: dict, quiet_s: float) -> httpx.Response:
        loop = asyncio.get_running_loop()
        self._waiting += 1
        notice = loop.call_later(quiet_s, self._quiet, quiet_s)
        try:
            response = await self._client.post(f"{self.server.url}/chat/completions", json=body)
            self._heard = time.monotonic()
            return response
        finally:
            self._waiting -= 1
            notice.cancel()

    async def open(self) -> None:
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s, connect=30.0), limits=limits,
                                         headers=self.server.headers())

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def chat(self, messages: list[dict], max_tokens: int, temperature: float, seed: int | None = None,
                   regex: str | None = None, quiet_s: float = QUIET_S) -> Reply:
        """One chat completion; ``regex`` constrains the answer (vLLM's ``structured_outputs``); a server silent
        for ``quiet_s`` while it waits is said to."""
        body = {"model": self.server.model, "messages": messages, "max_tokens": max_tokens,
                "temperature": temperature, **({"seed": seed} if seed is not None else {}),
                **({"structured_outputs": {"regex": regex}} if regex is not None else {})}
        drops, busy_since, wait = 0, None, 1.0
        while True:
            seen = self.server.restarts
            try:
                response = await self._post(body, quiet_s)
                if response.status_code in REFUSED:
                    raise Unavailable(f"server {self.server.url} refused the request: HTTP {response.status_code} "
                                      f"{response.text[:200]}")
                if response.status_code not in BUSY:
                    break
                busy_since = busy_since or time.monotonic()
                if time.monotonic() - busy_since >= self.busy_s:
                    raise Unavailable(f"server {self.server.url} busy for {self.busy_s:.0f} s (convert.busy_s): "
                                      f"HTTP {response.status_code} {response.text[:200]}")
                await asyncio.sleep(wait * random.uniform(0.5, 1.0))
                wait = min(wait * 2, 30.0)
            except UNREACHABLE as exc:
                # Raises ServerGone when the server will not come back; returns once it answers again.
                restarted = await asyncio.to_thread(self.server.recover, seen) != seen
                drops = 0 if restarted else drops + 1  # restarts are bounded by the server itself
                if drops == MAX_DROPS:
                    # Up and answering, yet this request keeps losing its connection: a failed attempt.
                    return Reply(error=f"connection lost {MAX_DROPS} times ({type(exc).__name__}: {exc})")
            except httpx.TimeoutException:
                return Reply(error=f"no answer within {self.timeout_s:.0f} s (client timeout_s)")
        if response.status_code != 200:
            return Reply(error=f"HTTP {response.status_code}: {response.text[:300]}", status=response.status_code)
        try:
            data = response.json()
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            text = choice["message"]["content"] or ""
            for token in self.server.special_tokens:
                text = text.replace(token, "")
            return Reply(text=text, finish_reason=choice.get("finish_reason"),
                         input_tokens=int(usage.get("prompt_tokens") or 0),
                         output_tokens=int(usage.get("completion_tokens") or 0))
        except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as exc:
            return Reply(error=f"not a chat completion ({type(exc).__name__}: {exc}): {response.text[:300]}",
                         status=response.status_code)
