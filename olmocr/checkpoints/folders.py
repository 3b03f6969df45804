"""Where the checkpoint stages find a model, and how they write one.

    <run>/                          a training run dir: its newest complete checkpoint (or ``step=N``, or
                                    ``step=best``: the best by trainer.keep_best, which its newest names)
    <run>/checkpoints/              the same
    <run>/checkpoints/step_N/       an SFT checkpoint: its ``model/`` folder
    <run>/checkpoints/checkpoint-N/ a GRPO (Hugging Face Trainer) checkpoint: the folder itself
    <folder>/                       a Hugging Face folder: config.json, or adapter_config.json (LoRA)

Any of these, and the output, may be local or remote (``s3://``, ``gs://``; ``AWS_ENDPOINT_URL`` for other S3 endpoints).
A checkpoint counts when its trainer's marker is there, the rule training resumes by.
"""

from __future__ import annotations

import datetime
import json
import os
import posixpath
import re
from dataclasses import dataclass

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

    @property
    def fs(self):
        return filesystem(self.path)

    def files(self) -> dict[str, int]:
        """Top-level file names and sizes (sub-folders are never model files: DeepSpeed state lives there)."""
        out = {}
        for info in self.fs.ls(self.path, detail=True):
            if info["type"] == "file":
                out[info["name"].rstrip("/").rsplit("/", 1)[-1]] = info["size"]
        return out

    def read_json(self, name: str) -> dict:
        with self.fs.open(join(self.path, name), "r") as fh:
            return json.load(fh)

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
            raise ValueError(f"{self.given}: weights are in PyTorch .bin files; re-save the model with "
                             "safetensors (save_pretrained does by default)")
        raise ValueError(f"{self.given}: no weights in {self.path} (expected model.safetensors or an index)")

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
        raise ValueError(f"{key}: {folder} holds a {family!r} model; expected one of {', '.join(FAMILIES)}")
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


def expand(sources: list[str]) -> list[str]:
    """Sources with wildcards (``runs/*``, ``s3://bucket/seed*``) replaced by the folders they match."""
    out = []
    for i, given in enumerate(sources):
        if not any(c in given for c in "*?["):
            out.append(given)
            continue
        fs = filesystem(given)
        pattern = given if is_remote(given) else os.path.abspath(os.path.expanduser(given))
        matches = sorted(fs.unstrip_protocol(p) if is_remote(given) else p for p in fs.glob(pattern) if fs.isdir(p))
        if not matches:
            raise ValueError(f"sources[{i}]: no folder matches {given}")
        out += matches
    return out


def best_step(fs, given: str, checkpoints: dict[int, str], key: str) -> int:
    """The step the newest checkpoint names as the run's best (trainer.keep_best)."""
    newest = checkpoints[max(checkpoints)]
    try:
        with fs.open(join(newest, BEST), "r") as fh:
            record = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{key}: step=best, but {given} records no best checkpoint ({newest} has no {BEST}: "
                         "train with trainer.keep_best=eval/bench/overall)") from None
    if record["step"] not in checkpoints:
        raise ValueError(f"{key}: {given}'s best checkpoint, step {record['step']} ({record['metric']} "
                         f"{record['value']:.4f}), is not there (removed by hand?)")
    return record["step"]


def resolve(given: str, step: int | str | None = None, key: str = "source") -> Checkpoint:
    """The model folder ``given`` names (see the module docstring); ``key`` names it in errors."""
    if not (step is None or step == "best" or (isinstance(step, int) and not isinstance(step, bool))):
        raise ValueError(f"step: expected a step number, best or null (the newest), got {step!r}")
    path = given if is_remote(given) else os.path.abspath(os.path.expanduser(given))
    path = path.rstrip("/") or "/"
    fs = filesystem(path)
    if not is_remote(path) and not os.path.isdir(path):
        raise ValueError(f"{key}: {given} is not a folder")
    kind = _is_model(fs, path)
    if kind is not None:
        match = CHECKPOINT_DIR.match(posixpath.basename(path))
        return Checkpoint(given, path, kind, int(match.group(1)) if match else None)
    match = CHECKPOINT_DIR.match(posixpath.basename(path))
    if match:  # an SFT checkpoint keeps its model in model/
        inner = join(path, "model")
        kind = _is_model(fs, inner)
        if kind is None:
            raise ValueError(f"{key}: {given} is a checkpoint with no model (no config.json or "
                             "adapter_config.json, here or in model/)")
        return Checkpoint(given, inner, kind, int(match.group(1)))
    checkpoints = _checkpoints_in(fs, join(path, "checkpoints")) or _checkpoints_in(fs, path)
    if not checkpoints:
        raise ValueError(f"{key}: {given} holds no model (expected a Hugging Face folder, a checkpoint "
                         "step_N/ or checkpoint-N/, or a run dir with complete checkpoints in checkpoints/)")
    if step is None:
        step = max(checkpoints)
    elif step == "best":
        step = best_step(fs, given, checkpoints, key)
    elif step not in checkpoints:
        raise ValueError(f"{key}: {given} has no complete checkpoint at step {step} (it has "
                         f"{', '.join(map(str, sorted(checkpoints)))})")
    resolved = resolve(checkpoints[step], key=key)
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
    folder itself, ``provenance.json`` written last, so a folder without it is an unfinished upload."""

    def __init__(self, path: str, overwrite: bool = False):
        self.remote = is_remote(path)
        self.path = path.rstrip("/") if self.remote else os.path.abspath(os.path.expanduser(path))
        self.fs = filesystem(self.path)
        there = self.fs.ls(self.path, detail=False) if self.fs.exists(self.path) else []
        if there and not overwrite:
            if self.remote and not any(name.rstrip("/").endswith("/provenance.json") for name in there):
                raise ValueError(f"output: {path} holds an unfinished upload (no provenance.json, which is written last: "
                                 "a run stopped part way); overwrite=true replaces it")
            raise ValueError(f"output: {path} exists and is not empty (overwrite=true replaces it)")
        self.root = self.path if self.remote else self.path + ".partial"
        if self.fs.exists(self.root) and (overwrite or not self.remote):
            self.fs.rm(self.root, recursive=True)
        self.fs.makedirs(self.root, exist_ok=True)

    def open(self, name: str):
        return self.fs.open(join(self.root, name), "wb")

    def put(self, local_file: str, name: str) -> None:
        self.fs.put_file(local_file, join(self.root, name))

    def commit(self) -> None:
        if self.remote:
            return
        if os.path.exists(self.path):
            self.fs.rm(self.path, recursive=True)
        os.rename(self.root, self.path)

    def abort(self) -> None:
        """Drop a local staging folder; a remote folder stays, recognisably unfinished (no provenance)."""
        if not self.remote:
            self.fs.rm(self.root, recursive=True)


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
