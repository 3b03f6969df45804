"""Where the checkpoint stages find a model, and how they write one.

    <run>/                          a training run dir: its newest complete checkpoint (or ``step=N``, or
                                    ``step=best``: the best by checkpoint.keep_best, which its newest names)
    <run>/checkpoints/              the same
    <run>/checkpoints/step_N/       an SFT checkpoint: its ``model/`` folder
    <run>/checkpoints/checkpoint-N/ a GRPO (Hugging Face Trainer) checkpoint: the folder itself
    <folder>/                       a Hugging Face folder: config.json, or adapter_config.json (LoRA)

Any of these, and the output, may be local or remote (``s3://``, ``gs://``; ``AWS_ENDPOINT_URL`` for other S3 endpoints).
A checkpoint counts when its trainer's marker is there, the rule training resumes by.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import posixpath
import re
import tempfile
import threading
from dataclasses import dataclass

from olmocr.errors import UserError
from olmocr.utils.io import filesystem, is_remote
from olmocr.utils.sync import BEST, MARKERS

CHECKPOINT_DIR = re.compile(r"^(?:step_|checkpoint-)(\d+)$")
# Training state that never belongs in a released model (weights are handled on their own).
TRAINING_STATE = re.compile(r"^(optimizer.*|scheduler.*|rng_state.*|trainer_state\.(json|pt)|training_args\.bin|"
                            r".*\.(pt|pth|bin))$")
WEIGHTS = re.compile(r"^(.*\.safetensors|model\.safetensors\.index\.json)$")
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def join(base: str, *parts: str) -> str:
    return posixpath.join(base.rstrip("/"), *parts)


@dataclass
class Checkpoint:
    """A resolved model folder. ``kind`` is ``full`` or ``adapter``."""

    given: str
    path: str
    kind: str
    step: int | None = None
    wait_s: float = 0.0  # how long a remote read waits out storage that does not answer

    @property
    def fs(self):
        return filesystem(self.path, wait_s=self.wait_s)

    def files(self) -> dict[str, int]:
        """Top-level file names and sizes (sub-folders are never model files: DeepSpeed state lives there)."""
        out = {}
        for info in self.fs.ls(self.path, detail=True):
            if info["type"] == "file":
                out[info["name"].rstrip("/").rsplit("/", 1)[-1]] = info["size"]
        return out

    def read_json(self, name: str) -> dict:
        return json.loads(self.fs.cat_file(join(self.path, name)))

    def config(self) -> dict:
        return self.read_json("adapter_config.json" if self.kind == "adapter" else "config.json")

    def weight_files(self) -> list[str]:
        """The safetensors files holding the weights, from the index when the weights are sharded."""
        files = self.files()
        if "model.safetensors.index.json" in files:
            return sorted(set(self.read_json("model.safetensors.index.json")["weight_map"].values()))
        if "model.safetensors" in files:
            return ["model.safetensors"]
        if "adapter_model.safetensors" in files:
            return ["adapter_model.safetensors"]
        if any(name.endswith(".bin") for name in files):
            raise UserError(f"{self.given}: weights are in PyTorch .bin files; re-save the model with "
                            "safetensors (save_pretrained does by default)")
        raise UserError(f"{self.given}: no weights in {self.path} (expected model.safetensors or an index)")

    def provenance(self) -> dict | None:
        """The folder's own provenance.json (a released model's), kept in what is made from it."""
        return self.read_json("provenance.json") if "provenance.json" in self.files() else None

    def has_processor(self) -> bool:
        files = self.files()
        return any(f in files for f in PROCESSOR_FILES) and any(f in files for f in TOKENIZER_FILES)

    def release_files(self) -> list[str]:
        """Files a released model keeps besides its weights: configs, processor and tokenizer files."""
        return sorted(name for name in self.files() if not TRAINING_STATE.match(name) and not WEIGHTS.match(name)
                      and name != "provenance.json")


def model_source(folder: str, key: str, dtype: str = "auto"):
    """The project's model loader for a local Hugging Face folder; ``dtype`` auto: as stored."""
    from olmocr.models.families import FAMILIES
    from olmocr.models.source import HubModel

    with open(os.path.join(folder, "config.json")) as fh:
        config = json.load(fh)
    family = config.get("model_type")
    if family not in FAMILIES:
        raise UserError(f"{key}: {folder} holds a {family!r} model; expected one of {', '.join(FAMILIES)}")
    if dtype == "auto":
        stored = config.get("dtype") or config.get("torch_dtype") or (config.get("text_config") or {}).get("dtype")
        dtype = str(stored or "float32").replace("torch.", "")
    return HubModel(folder, family=family, dtype=dtype)


def _is_model(fs, path: str) -> str | None:
    if fs.exists(join(path, "adapter_config.json")):
        return "adapter"
    if fs.exists(join(path, "config.json")):
        return "full"
    return None


def _checkpoints_in(fs, folder: str) -> dict[int, str]:
    """Complete checkpoints directly under ``folder``, by step."""
    found = {}
    try:
        children = fs.ls(folder, detail=True)
    except FileNotFoundError:
        return found
    for info in children:
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        match = CHECKPOINT_DIR.match(name)
        if info["type"] == "directory" and match:
            path = join(folder, name)
            if any(fs.exists(join(path, marker)) for marker in MARKERS):
                found[int(match.group(1))] = path
    return found


def expand(sources: list[str], wait_s: float = 0.0) -> list[str]:
    """Sources with wildcards (``runs/*``, ``s3://bucket/seed*``) replaced by the folders they match."""
    out = []
    for i, given in enumerate(sources):
        if not any(c in given for c in "*?["):
            out.append(given)
            continue
        fs = filesystem(given, wait_s=wait_s)
        pattern = given if is_remote(given) else os.path.abspath(os.path.expanduser(given))
        matches = sorted(fs.unstrip_protocol(p) if is_remote(given) else p for p in fs.glob(pattern) if fs.isdir(p))
        if not matches:
            raise UserError(f"sources[{i}]: no folder matches {given}")
        out += matches
    return out


def best_step(fs, given: str, checkpoints: dict[int, str], key: str) -> int:
    """The step the newest checkpoint names as the run's best (checkpoint.keep_best)."""
    newest = checkpoints[max(checkpoints)]
    try:
        record = json.loads(fs.cat_file(join(newest, BEST)))
    except FileNotFoundError:
        raise UserError(f"{key}: step=best, but {given} records no best checkpoint ({newest} has no {BEST}: "
                        "train with checkpoint.keep_best=eval/bench/overall)") from None
    if record["step"] not in checkpoints:
        raise UserError(f"{key}: {given}'s best checkpoint, step {record['step']} ({record['metric']} "
                        f"{record['value']:.4f}), is not there (removed by hand?)")
    return record["step"]


def resolve(given: str, step: int | str | None = None, key: str = "source", wait_s: float = 0.0) -> Checkpoint:
    """The model folder ``given`` names (see the module docstring); ``key`` names it in errors; remote storage
    that does not answer is waited out for up to ``wait_s`` at each look, here and in the checkpoint's reads."""
    if not (step is None or step == "best" or (isinstance(step, int) and not isinstance(step, bool))):
        raise UserError(f"step: expected a step number, best or null (the newest), got {step!r}")
    path = given if is_remote(given) else os.path.abspath(os.path.expanduser(given))
    path = path.rstrip("/") or "/"
    fs = filesystem(path, wait_s=wait_s)
    if not is_remote(path) and not os.path.isdir(path):
        raise UserError(f"{key}: {given} is not a folder")
    kind = _is_model(fs, path)
    if kind is not None:
        match = CHECKPOINT_DIR.match(posixpath.basename(path))
        return Checkpoint(given, path, kind, int(match.group(1)) if match else None, wait_s)
    match = CHECKPOINT_DIR.match(posixpath.basename(path))
    if match:  # an SFT checkpoint keeps its model in model/
        inner = join(path, "model")
        kind = _is_model(fs, inner)
        if kind is None:
            raise UserError(f"{key}: {given} is a checkpoint with no model (no config.json or "
                            "adapter_config.json, here or in model/)")
        return Checkpoint(given, inner, kind, int(match.group(1)), wait_s)
    checkpoints = _checkpoints_in(fs, join(path, "checkpoints")) or _checkpoints_in(fs, path)
    if not checkpoints:
        raise UserError(f"{key}: {given} holds no model (expected a Hugging Face folder, a checkpoint "
                        "step_N/ or checkpoint-N/, or a run dir with complete checkpoints in checkpoints/)")
    if step is None:
        step = max(checkpoints)
    elif step == "best":
        step = best_step(fs, given, checkpoints, key)
    elif step not in checkpoints:
        raise UserError(f"{key}: {given} has no complete checkpoint at step {step} (it has "
                        f"{', '.join(map(str, sorted(checkpoints)))})")
    resolved = resolve(checkpoints[step], key=key, wait_s=wait_s)
    resolved.given = given
    return resolved


def local_copy(checkpoint: Checkpoint, folder: str) -> str:
    """A local folder with the checkpoint's model files: the folder itself when local, else a copy made
    in ``folder`` (weights, configs and processor files; never training state)."""
    if not is_remote(checkpoint.path):
        return checkpoint.path
    os.makedirs(folder, exist_ok=True)
    fs = checkpoint.fs
    names = checkpoint.release_files() + checkpoint.weight_files()
    if "model.safetensors.index.json" in checkpoint.files():
        names.append("model.safetensors.index.json")
    for name in names:
        fs.get_file(join(checkpoint.path, name), os.path.join(folder, name))
    return folder


class Output:
    """The folder being written. Local: a staging folder renamed into place when complete. Remote: the
    folder itself, ``provenance.json`` written last, so a folder without it is an unfinished upload; each
    file is written locally and put in place whole, in the order written, while the next one is written (an
    upload that meets storage that does not answer waits for up to ``wait_s`` and is made again whole)."""

    def __init__(self, path: str, overwrite: bool = False, wait_s: float = 0.0):
        self.remote = is_remote(path)
        self.path = path.rstrip("/") if self.remote else os.path.abspath(os.path.expanduser(path))
        self.fs = filesystem(self.path, wait_s=wait_s)
        self._upload: Upload | None = None
        there = self.fs.ls(self.path, detail=False) if self.fs.exists(self.path) else []
        if there and not overwrite:
            if self.remote and not any(name.rstrip("/").endswith("/provenance.json") for name in there):
                raise UserError(f"output: {path} holds an unfinished upload (no provenance.json, which is written last: "
                                "a run stopped part way); overwrite=true replaces it")
            raise UserError(f"output: {path} exists and is not empty (overwrite=true replaces it)")
        self.root = self.path if self.remote else self.path + ".partial"
        if self.fs.exists(self.root) and (overwrite or not self.remote):
            self.fs.rm(self.root, recursive=True)
        self.fs.makedirs(self.root, exist_ok=True)
        if self.remote:  # credentials that may read but not write: found now, not after every weight is read
            probe = join(self.root, ".write-check")
            self.fs.pipe_file(probe, b"")
            self.fs.rm(probe)

    def open(self, name: str):
        """A file of the output, open for writing; ``discard`` it rather than close it when its writing failed."""
        return Staged(self, name) if self.remote else self.fs.open(join(self.root, name), "wb")

    def put(self, local_file: str, name: str) -> None:
        self.wait()  # files land in the order they are finished: provenance.json last
        self.fs.put_file(local_file, join(self.root, name))

    def discard(self, handle) -> None:
        """A file whose writing failed: not put in place (a local one goes with the staging folder)."""
        if isinstance(handle, Staged):
            handle.discard()
        else:
            handle.close()

    def upload(self, local_file: str, name: str) -> None:
        """Put ``local_file`` in place as ``name`` in the background, then remove it; the previous upload is
        awaited first, so at most two files are held locally."""
        self.wait()
        self._upload = Upload(self.fs, local_file, join(self.root, name))

    def wait(self) -> None:
        """Until the file being uploaded is in place (its failure raised here)."""
        upload, self._upload = self._upload, None
        if upload is not None:
            upload.result()

    def commit(self) -> None:
        if self.remote:
            self.wait()
            return
        if os.path.exists(self.path):
            self.fs.rm(self.path, recursive=True)
        os.rename(self.root, self.path)

    def abort(self) -> None:
        """Drop a local staging folder; a remote folder stays, recognisably unfinished (no provenance)."""
        if self._upload is not None:
            self._upload.abandon()
            self._upload = None
        if not self.remote:
            self.fs.rm(self.root, recursive=True)


class Staged:
    """A file of a remote output, written to a local temporary file and uploaded whole when closed."""

    def __init__(self, out: Output, name: str):
        self.out, self.name = out, name
        self.file = tempfile.NamedTemporaryFile(prefix="olmocr-output-", delete=False)

    def write(self, data) -> int:
        return self.file.write(data)

    def close(self) -> None:
        if not self.file.closed:
            self.file.close()
            self.out.upload(self.file.name, self.name)

    def discard(self) -> None:
        if not self.file.closed:
            self.file.close()
            os.unlink(self.file.name)

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, kind, *exc) -> None:
        self.discard() if kind is not None else self.close()


class Upload:
    """One file put in place by a thread of its own, the local file removed afterwards. The thread is a daemon:
    a run that stops on an error does not wait for an upload that waits out an outage."""

    def __init__(self, fs, local_file: str, remote: str):
        self.local_file, self.error = local_file, None
        self.thread = threading.Thread(target=self._put, args=(fs, remote), name="output-upload", daemon=True)
        self.thread.start()

    def _put(self, fs, remote: str) -> None:
        try:
            fs.put_file(self.local_file, remote)
        except BaseException as exc:  # noqa: BLE001 - raised again by result(), in the writing thread
            self.error = exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.local_file)

    def result(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error

    def abandon(self) -> None:
        """The run stops: the thread ends with the process; its file goes now if the put has not begun."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.local_file)


def file_hash(checkpoint: Checkpoint) -> str:
    """:class:`~olmocr.checkpoints.tensors.WeightsHash` of a checkpoint's weight files."""
    from olmocr.checkpoints.tensors import SafetensorsFile, WeightsHash

    digest = WeightsHash()
    for name in checkpoint.weight_files():
        f = SafetensorsFile(checkpoint.fs, join(checkpoint.path, name))
        for entry in f.in_file_order():
            digest.add(entry, f.read(entry.name))
        f.close()
    return digest.hexdigest()


def provenance_of(**fields) -> dict:
    """A released folder's provenance.json: what it was made from (``fields``), when, and by what code."""
    from olmocr.utils.runinfo import run_facts

    return {**fields, "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), **run_facts()}
