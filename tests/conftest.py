from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

# The venv holds no bytecode until a module is first imported (scripts/setup.sh): the session and every
# process it starts write it then, once, where PYTHONDONTWRITEBYTECODE would have each of them compile
# torch's and transformers' sources again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

# One share of the cores per xdist worker, set before torch starts its thread pool and inherited by every
# subprocess a test starts: two workers each running torch on every core fight over them (measured on 2
# cores: test_train + test_grpo took 225 s with 2 threads per worker, 125 s with 1).
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, CORES // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import torch  # noqa: E402

# vLLM's CPU build runs the model in a third process of its own (the multiprocessing executor, there to bind
# OMP threads) unless told otherwise: the servers the tests start keep it in the engine's process, as vLLM
# does on a single GPU, a vLLM import (20 s of CPU) less per server.
if not torch.cuda.is_available():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from olmocr.config import CONF_DIR, PROJECT_ROOT  # noqa: E402

SAMPLE = os.path.join(PROJECT_ROOT, "data", "sample")
# DeepSpeed's CPU communication op, built into the venv by scripts/setup.sh --dev (else on first use).
os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))

# Each test starts from the session's environment: what the session's own fixtures set (session_setenv)
# and nothing a library imported along the way put there (transformers' video processing imports opencv,
# which sets LD_LIBRARY_PATH; vLLM sets TORCHINDUCTOR_COMPILE_THREADS, PYTORCH_NVML_BASED_CUDA_CHECK, …),
# also when a session fixture did the import: a process a later test starts sees what it would alone, and
# the warm interpreter's commands stay warm.
SESSION_ENV: dict[str, str] = {}
_STARTING_ENV = dict(os.environ)


def session_setenv(key: str, value: str) -> None:
    SESSION_ENV[key] = os.environ[key] = value


def session_environment() -> dict[str, str]:
    return {**_STARTING_ENV, **SESSION_ENV}


# The tiny SFT run whose per-step losses tests/expected/tiny_sft_losses.json holds (measured on one machine;
# other CPUs and libraries agree to well within 2e-3). A run stopped early with trainer.hard_stop.value
# keeps the schedule of its 30 steps, and so these losses.
STORED_RUN = ["data.steps.render.longest_side=256", "trainer.eval_interval=null", "trainer.batch_size=2",
              "trainer.max_duration.value=30", "callbacks.plots=null"]
# The stored run (one process, batch 2) as two processes of batch 1: the same samples each step.
TWO_RANKS = [o for o in STORED_RUN if not o.startswith("trainer.batch_size")] + ["trainer.batch_size=1"]


# trainer.compile in the CPU tests: the graphs dynamo traces, differentiated by AOTAutograd as every backend does,
# run without generating kernels (the C++ ones inductor writes for a CPU are not what a GPU runs, and cost a
# minute more CPU here; test_gpu compiles with inductor).
COMPILE = ["trainer.compile=true", "trainer.compile_backend=olmocr_test_aot_eager"]
COMPILED: list = []  # the graphs that backend was given


@torch._dynamo.register_backend(name="olmocr_test_aot_eager")
def counted_aot_eager(graph, example_inputs, **kwargs):
    COMPILED.append(graph)
    return torch._dynamo.lookup_backend("aot_eager")(graph, example_inputs, **kwargs)


@contextlib.contextmanager
def compiling(recompile_limit: int = 8):
    """A compiled run in a test: dynamo starts afresh (no other test's entries count against its limits), and
    hitting the recompile limit is an error, where a run past it would go on eagerly without a word."""
    torch._dynamo.reset()
    COMPILED.clear()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=recompile_limit):
        yield COMPILED


def stored_losses() -> dict[int, float]:
    import json

    with open(os.path.join(os.path.dirname(__file__), "expected", "tiny_sft_losses.json")) as fh:
        return {int(step): loss for step, loss in json.load(fh).items()}


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker more than there are cores. The tests spend a good part of their time waiting on the
    processes and servers they start (2 cores, two workers: 163% CPU and 676 s; three workers: 178% and 585 s).
    PYTEST_XDIST_AUTO_NUM_WORKERS still sets the number."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return CORES + 1


def long(item) -> bool:
    """Whether a test is of the integration tier (``integration``, or ``vllm``: the real engine)."""
    return "integration" in item.keywords or "vllm" in item.keywords


def spread_slow_tests(items: list, workers: int) -> list:
    """The order that starts every worker on its share of the long tests. xdist's worksteal scheduler hands
    worker i the i-th contiguous slice of the list and later moves tests from the end of a worker's slice
    to an idle one: so each slice starts with its long tests, the fast ones fill the rest, and no worker
    ends the run alone on a long test drawn last. The `vllm` tests share the first slice: the first of
    them compiles vLLM's CPU kernels into that worker's inductor cache (its TMPDIR) and the others load
    them, where each worker would compile them again (~13 s of C++ each)."""
    slow = [item for item in items if long(item)]
    fast = iter([item for item in items if not long(item)])
    shares = [[] for _ in range(workers)]
    shares[0] += [item for item in slow if item.get_closest_marker("vllm")]
    for item in slow:
        if not item.get_closest_marker("vllm"):
            min(shares, key=len).append(item)
    ordered, left = [], len(items)
    for i, mine in enumerate(shares):
        size = left // (workers - i)  # xdist's: what is left, shared among the workers not yet served
        if len(mine) > size:  # more slow tests than tests: nothing to spread
            return sorted(items, key=lambda item: not long(item))
        ordered += mine + [next(fast) for _ in range(size - len(mine))]
        left -= size
    return ordered


def pytest_addoption(parser):
    parser.addoption("--integration", action="store_true",
                     help="also run the integration tier: real components and servers (vLLM, SLURM, S3 faults), runs "
                          "that wait out faults, the reader guard and the benchmarks (README's test command does)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--integration"):  # the fast tier: unit tests and short runs
        left_out = [item for item in items if long(item)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not long(item)]
    items[:] = spread_slow_tests(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def shared_folder(tmp_path_factory, name: str):
    """A folder of the session that every xdist worker sees (beside the workers' own base temps)."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    path.mkdir(exist_ok=True)
    return path


def built_once(tmp_path_factory, name: str, build) -> str:
    """A folder that ``build(folder)`` fills once per session, by whichever xdist worker asks first (the others
    wait for it), then read, never changed, by every test that uses it."""
    from filelock import FileLock

    root = shared_folder(tmp_path_factory, "built")
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return str(folder)


class SmallDisk:
    """A folder on a file system of its own (a small tmpfs): the full disk a long job meets."""

    def __init__(self, path):
        self.path = path
        self._filler = path / ".filler"

    def leave(self, free: int) -> None:
        """Fill the file system until ``free`` bytes are left (0 and a full disk)."""
        self.free()
        target = shutil.disk_usage(self.path).free - free
        if target > 0:
            with open(self._filler, "wb") as fh:
                os.posix_fallocate(fh.fileno(), 0, target)

    def free(self) -> None:
        """Give back what :meth:`leave` took."""
        self._filler.unlink(missing_ok=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB file system mounted for the test (root only: elsewhere the test says it cannot mount one)."""
    import subprocess

    path = tmp_path / "disk"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path)], capture_output=True,
                             text=True) if os.geteuid() == 0 else None
    if mounted is None or mounted.returncode:
        pytest.skip("a small file system of its own needs root and mount: "
                    + (mounted.stderr.strip() if mounted else "not root"))
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


@pytest.fixture(scope="session", autouse=True)
def temp_under_basetemp(tmp_path_factory):
    """Temporary files of the tests and of the processes they start (torchrun's log dirs, wandb's staging) go
    under pytest's base temp, which pytest prunes, instead of staying in /tmp after every run."""
    import tempfile

    session_setenv("TMPDIR", str(tmp_path_factory.mktemp("tmp")))
    tempfile.tempdir = None  # gettempdir() caches its first answer


# What a process started by a test inherits of this one besides its environment: its blocked signals and
# the signals it ignores.
INHERITED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


@pytest.fixture(autouse=True)
def signals_as_found():
    """A test that leaves a signal blocked or ignored in this process (a SIGTERM held while a loader worker
    forks, say) makes every process a later test starts deaf to it, and that later test fails far from the
    cause: the test that left it errors here, by name, and the state is put back."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    ignored = {s for s in INHERITED_SIGNALS if signal.getsignal(s) == signal.SIG_IGN}
    yield
    left_blocked = signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    left_ignored = {s for s in INHERITED_SIGNALS if signal.getsignal(s) == signal.SIG_IGN}
    for sig in left_ignored - ignored:
        signal.signal(sig, signal.SIG_DFL)
    assert (left_blocked, left_ignored) == (blocked, ignored), (
        f"the test left signals blocked {sorted(s.name for s in left_blocked - blocked)} or ignored "
        f"{sorted(s.name for s in left_ignored - ignored)}")


@pytest.fixture(autouse=True)
def logging_as_found():
    """A stage run in this process through Hydra leaves its job logging on the root logger, writing to the
    streams that test's capture then closes: a later test's logs (a client's warnings) would print "Logging
    error" tracebacks into what it reads back. The root logger is put back as it was."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    yield
    os.environ.clear()
    os.environ.update(session_environment())


@pytest.fixture(scope="session")
def warm_python(tmp_path_factory, temp_under_basetemp) -> str:
    """An executable that runs ``python [-u] -m/-c/script …`` as a process forked from a warm interpreter that
    has imported torch, torchvision and transformers (tests/warm_python.py): a stage's command without the
    8-12 s of CPU its imports cost. Use it where ``sys.executable`` would be; ``$PYTHON`` for the scripts."""
    import subprocess
    import tempfile

    from warm_python import client_source

    folder = tmp_path_factory.mktemp("warm")
    socket_path, client = str(folder / "socket"), folder / "python"
    short = None
    if len(socket_path) > 100:  # a Unix socket's path has room for 107 bytes
        short = tempfile.mkdtemp(prefix="warm-", dir="/tmp")
        socket_path = os.path.join(short, "socket")
    server = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "warm_python.py"), socket_path],
                              stdout=subprocess.PIPE, text=True, env=session_environment())
    if server.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the warm interpreter did not start (exit status {server.wait()})")
    client.write_text(client_source(sys.executable, socket_path))
    client.chmod(0o755)
    yield str(client)
    server.terminate()
    server.wait(timeout=30)
    if short:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> str:
    """One model/index cache for the session, isolated from the user's ~/.cache/olmocr and shared by the xdist
    workers: what it holds (the tiny models) is built once, under a lock, by whichever asks first."""
    path = shared_folder(tmp_path_factory, "olmocr-cache")
    session_setenv("OLMOCR_CACHE", str(path))
    return str(path)


@pytest.fixture(scope="session")
def tiny(cache_dir):
    from olmocr.models import TinyModel

    return TinyModel(cache_dir=os.path.join(cache_dir, "models"))


@pytest.fixture(scope="session")
def processor(tiny):
    return tiny.load_processor()


def v4_steps(longest_side: int = 512, drop: tuple[str, ...] = (), **replace) -> dict:
    """The production step list from conf/data/steps/v4.yaml, smaller renders, some steps dropped or replaced."""
    from omegaconf import OmegaConf

    steps = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF_DIR, "data", "steps", "v4.yaml")))
    steps["render"]["longest_side"] = longest_side
    return {name: replace.get(name, cfg) for name, cfg in steps.items() if name not in drop}


def write_pdf(path: str, pages: list[str], rotate: int = 0) -> str:
    from reportlab.lib.pagesizes import LETTER
    from reportlab.pdfgen.canvas import Canvas

    # reportlab's pagesize is the displayed size; it swaps the MediaBox back for quarter turns.
    canvas = Canvas(path, pagesize=LETTER[::-1] if rotate in (90, 270) else LETTER, invariant=1)
    for text in pages:
        if rotate:
            canvas.setPageRotation(rotate)
        canvas.setFont("Helvetica", 14)
        y = 700
        for line in text.split("\n"):
            canvas.drawString(72, y, line)
            y -= 20
        canvas.showPage()
    canvas.save()
    return path


def write_md(path: str, body: str = "Hello world.", **fields) -> str:
    meta = {"primary_language": "en", "is_rotation_valid": True, "rotation_correction": 0, "is_table": False,
            "is_diagram": False, **fields}
    with open(path, "w") as fh:
        fh.write("---\n" + "".join(f"{k}: {v}\n" for k, v in meta.items()) + "---\n" + body + "\n")
    return path


def write_encrypted_pdf(path: str, text: str = "secret page") -> str:
    from pypdf import PdfReader, PdfWriter

    plain = write_pdf(path + ".plain.pdf", [text])
    writer = PdfWriter()
    writer.append(PdfReader(plain))
    writer.encrypt(user_password="user-secret", owner_password="owner-secret", algorithm="AES-128")
    with open(path, "wb") as fh:
        writer.write(fh)
    os.remove(plain)
    return path


@pytest.fixture
def sample_copy(tmp_path) -> str:
    """A writable copy of the bundled training pages."""
    dest = tmp_path / "pages"
    shutil.copytree(os.path.join(SAMPLE, "train", "pdfs"), dest)
    return str(dest)


@pytest.fixture
def s3_server(monkeypatch):
    """A real S3 API (moto on 127.0.0.1, conditional writes atomic as on S3) for s3:// paths; the
    environment points clients, subprocesses included, at it."""
    from support.s3server import S3Server

    server = S3Server().start()
    for key, value in server.environment().items():
        monkeypatch.setenv(key, value)
    import fsspec

    fsspec.config.conf.pop("s3", None)
    yield server.endpoint
    server.stop()


@pytest.fixture(params=["local", "s3"])
def workspace_root(request, tmp_path) -> str:
    """A workspace's root, once as a local folder and once on a real S3 API (moto): each test runs on both."""
    if request.param == "local":
        return str(tmp_path / "workspace")
    import s3fs

    endpoint = request.getfixturevalue("s3_server")
    s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": endpoint}).mkdir("work")
    return "s3://work/ws"


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A real SLURM cluster of two nodes on this machine (tests/support/slurm_cluster.py), one per test session:
    the xdist workers share it (the first test that needs it starts it, the last worker to finish stops it).
    Without the Debian packages or root, the tests that need it skip and say which."""
    from filelock import FileLock

    from support.slurm_cluster import LocalSlurm, missing

    why = missing()
    if why:
        pytest.skip(why)
    root = shared_folder(tmp_path_factory, "slurm")
    # Eight CPUs a node: the tests' jobs run side by side (sharing this machine's cores) instead of queueing.
    cluster = LocalSlurm(str(root / "cluster"), nodes=2, cpus=8, kill_wait_s=1)
    users = root / "users"
    with FileLock(str(root / "lock")):
        count = int(users.read_text()) if users.exists() else 0
        if count == 0:
            cluster.start()
        users.write_text(str(count + 1))
    yield cluster
    with FileLock(str(root / "lock")):
        count = int(users.read_text()) - 1
        if count == 0:
            cluster.stop()
        users.write_text(str(count))


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium, headless, through Selenium: pages people look at, as they see them."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, "chromium and chromium-driver are needed: bash scripts/setup.sh --dev installs them"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,2000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    yield chrome
    chrome.quit()


SERVE_TOKEN = "s3cret-token-for-tests"  # the token of the services the tests start


def free_local_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def start_service(tmp_path, cache_dir):
    """``start(*overrides)``: the service on a free port (a token, 0.5 MB uploads, 2 pages a job), its base URL
    and workspace once /health answers."""
    procs = []

    def start(*overrides: str, name: str = "service"):
        port = free_local_port()
        workspace = tmp_path / "ws"
        env = dict(os.environ, OLMOCR_TEST_TOKEN=SERVE_TOKEN)
        # A session of its own: a test may kill it whole, as a machine that dies
        proc = subprocess.Popen([sys.executable, "-m", "olmocr.serve", f"port={port}", f"workspace={workspace}",
                                 "token_env=OLMOCR_TEST_TOKEN", "max_upload_mb=0.5", "max_pages=2",
                                 f"hydra.run.dir={tmp_path / ('run_' + name)}", *overrides], cwd=PROJECT_ROOT,
                                env=env, stdout=open(tmp_path / f"{name}.log", "w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                return base, workspace
            except OSError:
                assert proc.poll() is None, (tmp_path / f"{name}.log").read_text()
                time.sleep(0.3)
        raise AssertionError("the service did not answer /health in 120 s")

    start.procs = procs
    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
