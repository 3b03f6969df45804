"""The model server the pipeline sends pages to: one it starts (``transformers serve`` on any device;
``vllm serve`` on GPUs, or vLLM's CPU build) or one that already runs elsewhere (any OpenAI-compatible endpoint).

A started server is checked on ``/health`` before any page is sent, restarted when it dies (at most
``max_restarts`` times), and stopped with its whole process group at exit. It runs under
:mod:`olmocr.utils.guard`, so it also ends, with every process it started, when its worker is killed
outright (SIGKILL runs no cleanup). Its output goes to a log file whose path every error names.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Annotated

from olmocr.config import Matches, OneOf, Positive, Range, runtime
from olmocr.errors import UserError
from olmocr.pipeline.failures import StopWork
from olmocr.utils.vllm_cpu import server_env

log = logging.getLogger("olmocr.pipeline")


Port = Annotated[int | None, Range(at_least=1, at_most=65535, null="a free one")]
Restarts = Annotated[int, Range(at_least=0)]
VLLM_DTYPES = ("auto", "bfloat16", "float", "float16", "float32", "half")  # vllm serve --dtype (a test keeps them equal)
# transformers serve's --device: torch's device names as a device map takes them ("0": the first GPU).
Device = Annotated[str, Matches(r"auto|cpu|mps|(cuda|xpu|npu|hpu|mlu)(:\d+)?|\d+",
                                "auto, cpu, mps, cuda, cuda:N (or xpu, npu, hpu), or a GPU number")]


class ServerGone(StopWork):
    """The server cannot be reached and will not come back: the run must stop (nothing is lost; the
    queue gives the items back)."""


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - 4096))
            lines = [line.strip() for line in fh.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def executable(name: str) -> str:
    """A console script of this Python's environment (found even when its bin folder is not on PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.access(beside, os.X_OK) else shutil.which(name) or name


class Server:
    """Where pages go: ``url`` (an OpenAI-compatible base, ending in /v1), the ``model`` name requests
    carry, and the headers they need. ``recover`` is called when a request could not reach the server;
    it returns when the server may answer again, or raises :class:`ServerGone`."""

    url: str
    model: str
    name = "the server"
    # Control tokens the server leaves in its answers and the client drops, so every server answers as
    # vLLM does (it decodes with skip_special_tokens).
    special_tokens: tuple[str, ...] = ()
    # Whether requests may constrain decoding to a regular expression (vLLM's ``structured_outputs``):
    # True, False, or None when only asking the server tells.
    structured_outputs: bool | None = True

    def headers(self) -> dict[str, str]:
        return {}

    def start(self, log_path: str) -> None:
        """Make the server ready; ``log_path`` takes a started server's output."""

    def recover(self, seen_restarts: int) -> int:
        raise NotImplementedError

    def check_structured_outputs(self, regex: str) -> None:
        """UserError in one line when the server refuses a request constrained to ``regex`` (a short
        text-only one, sent once at start), rather than a failed attempt on every page."""
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": "Say nothing."}],
                           "max_tokens": 1, "temperature": 0.0, "structured_outputs": {"regex": regex}}).encode()
        request = urllib.request.Request(self.url + "/chat/completions", data=body, method="POST",
                                         headers={"Content-Type": "application/json", **self.headers()})
        try:
            urllib.request.urlopen(request, timeout=120).close()
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in (401, 403, 429):
                detail = exc.read().decode(errors="replace").strip().replace("\n", " ")[:200]
                raise UserError(f"convert.guided: {self.name} at {self.url} refuses requests constrained to the "
                                f"page format (structured_outputs): HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError):
            pass  # not answering now: the pages find out, and wait for it

    @property
    def restarts(self) -> int:
        return 0

    def stop(self) -> None:
        """Stop what :meth:`start` started."""


class ManagedServer(Server):
    """A server process this pipeline starts, watches and stops."""

    name = "server"
    source = None  # the model it serves (olmocr.models.source.ModelSource), where it loads one

    def __init__(self, host: str = "127.0.0.1", port: Port = None, startup_timeout_s: Positive = 300.0,
                 max_restarts: Restarts = 3, env: Mapping[str, str] | None = None):
        self.host = host
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.max_restarts = max_restarts
        self.env = dict(env or {})
        self.log_path: str | None = None
        self._process: subprocess.Popen | None = None
        self._restarts = 0
        self._lock = threading.Lock()

    def command(self) -> list[str]:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The started server's process id (its process group's), or None before it starts."""
        return self._process.pid if self._process else None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def restarts(self) -> int:
        return self._restarts

    def start(self, log_path: str) -> None:
        self.log_path = log_path
        if self.port is None:
            self.port = free_port(self.host)
        self._launch()

    def _launch(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        command = self.command()
        env = {**os.environ, **self.env, **(self.source.server_env() if self.source is not None else {})}
        with open(self.log_path, "ab") as out:
            out.write(f"\n$ {' '.join(command)}\n".encode())
            out.flush()
            if shutil.which(command[0]) is None and not os.access(command[0], os.X_OK):
                raise ServerGone(f"server: cannot run {command[0]} (not found); {self.hint()}")
            # Its own session under a guard, so stopping it stops the processes it starts (vLLM's engine
            # processes), and a worker that dies without stopping it takes it along.
            guarded = [sys.executable, "-m", "olmocr.utils.guard", "--", *command]
            self._process = subprocess.Popen(guarded, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True)
        log.info("%s (pid %d) starting on %s (log: %s)", self.name, self._process.pid, self.url, self.log_path)
        self._wait_healthy()

    def hint(self) -> str:
        return ""

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _wait_healthy(self) -> None:
        start = time.monotonic()
        while not self._healthy():
            code = self._process.poll()
            if code is not None:
                raise ServerGone(f"{self.name} exited with code {code} before answering on {self.url}: "
                                 f"{_last_line(self.log_path) or 'no output'} (log: {self.log_path})")
            if time.monotonic() - start > self.startup_timeout_s:
                self._kill()
                raise ServerGone(f"{self.name} did not answer on {self.url}/health within "
                                 f"{self.startup_timeout_s:.0f} s: {_last_line(self.log_path) or 'no output'} "
                                 f"(log: {self.log_path})")
            time.sleep(0.25)
        log.info("%s ready on %s after %.1f s", self.name, self.url, time.monotonic() - start)

    def recover(self, seen_restarts: int) -> int:
        """Restart the server if it died (once, however many requests noticed), and wait until it answers.
        ``seen_restarts`` is the restart count the caller knew when its request failed: a caller that
        comes after another one's restart just tries again."""
        with self._lock:
            if self._restarts != seen_restarts:
                return self._restarts
            alive = self._process is not None and self._process.poll() is None
            if alive and self._healthy():
                return self._restarts  # a dropped connection, not a dead server
            if alive:  # up but not answering: give it its startup time before calling it dead
                deadline = time.monotonic() + self.startup_timeout_s
                while time.monotonic() < deadline and self._process.poll() is None:
                    if self._healthy():
                        return self._restarts
                    time.sleep(0.5)
            code = self._process.poll() if self._process else None
            if self._restarts >= self.max_restarts:
                raise ServerGone(f"{self.name} on {self.url} stopped answering (exit code {code}) and was "
                                 f"already restarted {self._restarts} time(s) (server.max_restarts); "
                                 f"log: {self.log_path}")
            self._restarts += 1
            log.warning("%s on %s stopped answering (exit code %s); restart %d of %d", self.name, self.url,
                        code, self._restarts, self.max_restarts)
            self._kill()
            self._launch()
            return self._restarts

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def stop(self) -> None:
        with self._lock:
            self._kill()


@runtime("model")
class TransformersServer(ManagedServer):
    """``transformers serve <model>``: any transformers model, on CPU or GPU; the embedded default."""

    name = "transformers serve"
    structured_outputs = False

    def __init__(self, model, device: Device = "cpu",
                 dtype: Annotated[str, OneOf("auto", "float32", "bfloat16", "float16")] = "auto",
                 continuous_batching: bool = False, host: str = "127.0.0.1", port: Port = None,
                 startup_timeout_s: Positive = 300.0, max_restarts: Restarts = 3):
        # Without the update check, an offline machine does not wait on PyPI at every start.
        super().__init__(host, port, startup_timeout_s, max_restarts, {"HF_HUB_DISABLE_UPDATE_CHECK": "1"})
        self.source = model
        self.device = device
        self.dtype = dtype
        self.continuous_batching = continuous_batching

    @property
    def model(self) -> str:
        # transformers serve pinned to a model answers only requests that name exactly that model.
        return self.source.path

    def start(self, log_path: str) -> None:
        # transformers serve keeps special tokens in Qwen-family answers (its response parser reads the
        # raw decode): a sampled <|image_pad|> would reach Dolma text and, in a DPO pair, become an
        # image placeholder with no image behind it. Read once the server has loaded the model, so a
        # folder that is no model fails with the server's own error; transformers (seconds to import) is
        # imported meanwhile, while the server loads, rather than before it starts. The model is found (a tiny
        # one built, which imports transformers itself) first: two threads importing transformers' modules at once
        # can each meet the other's half-made module ("cannot import name PreTrainedTokenizerFast").
        self.source.path  # noqa: B018 - resolved (built) here, before the import thread starts
        importing = threading.Thread(target=importlib.import_module,
                                     args=("transformers.models.auto.tokenization_auto",), daemon=True)
        importing.start()
        try:
            super().start(log_path)
        finally:
            importing.join()
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.source.path, **self.source.pretrained_kwargs())
        self.special_tokens = tuple(sorted({t for t in tokenizer.all_special_tokens if t}, key=len, reverse=True))

    def command(self) -> list[str]:
        command = [executable("transformers"), "serve", self.source.path, "--host", self.host, "--port", str(self.port),
                   "--device", self.device, "--dtype", self.dtype, "--log-level", "warning"]
        return command + (["--continuous-batching"] if self.continuous_batching else [])

    def hint(self) -> str:
        return "install the serving extra: pip install 'transformers[serving]'"


@runtime("model")
class VllmServer(ManagedServer):
    """``vllm serve <model>``: vLLM on this machine's GPUs, or its CPU build where there is no GPU."""

    name = "vllm serve"

    def __init__(self, model, served_model_name: str = "olmocr", dtype: Annotated[str, OneOf(*VLLM_DTYPES)] = "auto",
                 max_model_len: Annotated[int | None, Range(at_least=1, null="the model's own")] = 16384,
                 gpu_memory_utilization: Annotated[float | None,
                                                   Range(above=0, at_most=1, null="vLLM's default")] = None,
                 cpu_kv_cache_gib: Annotated[int | None, Range(at_least=1, null="vLLM's default")] = None,
                 tensor_parallel_size: Annotated[int, Range(at_least=1)] = 1,
                 data_parallel_size: Annotated[int, Range(at_least=1)] = 1,
                 max_num_seqs: Annotated[int | None, Range(at_least=1, null="vLLM's default")] = None,
                 extra_args: list[str] | None = None, host: str = "127.0.0.1", port: Port = None,
                 startup_timeout_s: Positive = 900.0, max_restarts: Restarts = 3):
        # One OpenMP thread: several servers on one multi-GPU node otherwise fight over every core. (The CPU
        # build binds its own threads to cores whatever this says.)
        super().__init__(host, port, startup_timeout_s, max_restarts,
                         {"OMP_NUM_THREADS": "1", **server_env(cpu_kv_cache_gib)})
        self.source = model
        self.served_model_name = served_model_name
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.gpu_memory_utilization = gpu_memory_utilization
        self.tensor_parallel_size = tensor_parallel_size
        self.data_parallel_size = data_parallel_size
        self.max_num_seqs = max_num_seqs
        self.extra_args = list(extra_args or [])

    @property
    def model(self) -> str:
        return self.served_model_name

    def command(self) -> list[str]:
        # A FP8 checkpoint from python -m olmocr.compress carries its quantization config; vLLM reads it.
        command = [executable("vllm"), "serve", self.source.path, "--served-model-name", self.served_model_name,
                   "--host", self.host, "--port", str(self.port), "--dtype", self.dtype,
                   "--tensor-parallel-size", str(self.tensor_parallel_size),
                   "--data-parallel-size", str(self.data_parallel_size),
                   # One page image per request and never a video: the memory vLLM would reserve for the
                   # largest multimodal request goes to the KV cache instead.
                   "--limit-mm-per-prompt", json.dumps({"image": 1, "video": 0})]
        revision = self.source.pretrained_kwargs().get("revision")
        optional = {"--revision": revision, "--max-model-len": self.max_model_len,
                    "--gpu-memory-utilization": self.gpu_memory_utilization, "--max-num-seqs": self.max_num_seqs}
        for flag, value in optional.items():
            if value is not None:
                command += [flag, str(value)]
        return command + self.extra_args

    def hint(self) -> str:
        return "run bash scripts/setup.sh: it installs vLLM (its CPU build on a machine without CUDA)"


class ExternalServer(Server):
    """Any OpenAI-compatible endpoint that runs elsewhere. Its API key is read from the environment
    variable ``api_key_env`` names, so it never appears in a config or a log."""

    structured_outputs = None  # asked at start when convert.guided is on

    def __init__(self, url: str, model_name: str, api_key_env: str | None = None, unreachable_s: Positive = 300.0):
        if not url.startswith(("http://", "https://")):
            raise UserError(f"server.url: expected an http(s):// base URL like http://host:8000/v1, got {url!r}")
        self.url = url.rstrip("/")
        self.model = model_name
        self.api_key_env = api_key_env
        self.unreachable_s = unreachable_s

    def headers(self) -> dict[str, str]:
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise UserError(f"server.api_key_env: the environment variable {self.api_key_env} is not set")
        return {"Authorization": f"Bearer {key}"}

    def start(self, log_path: str) -> None:
        """Checked before any item is claimed: the key is set, the server answers (waited for as in
        :meth:`recover`), and it takes the key."""
        headers = self.headers()
        self.recover(0)
        try:
            urllib.request.urlopen(urllib.request.Request(self.url + "/models", headers=headers), timeout=30).close()
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                where = f"the key in ${self.api_key_env}" if self.api_key_env else "no key (server.api_key_env)"
                raise UserError(f"server {self.url}: refused {where}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError):
            pass  # gone again since recover(): the first page finds out, and waits again

    def _reachable(self) -> bool:
        # Any HTTP answer (even 404) means the endpoint is there; only connection errors count as down.
        try:
            urllib.request.urlopen(self.url + "/models", timeout=10).close()
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError, ValueError):
            return False
        return True

    def recover(self, seen_restarts: int) -> int:
        deadline, wait = time.monotonic() + self.unreachable_s, 1.0
        while not self._reachable():
            if time.monotonic() >= deadline:
                raise ServerGone(f"server {self.url}: unreachable for {self.unreachable_s:.0f} s "
                                 "(server.unreachable_s)")
            time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
            wait = min(wait * 2, 30.0)
        return 0
