"""A released model folder from training checkpoints: a LoRA adapter merged into its base, several
checkpoints souped (weights averaged), or one checkpoint made self-contained.

Weights stream tensor by tensor: each output tensor is read from every source, averaged in fp32, cast
back and written before the next is read, so souping K checkpoints holds about K tensors in memory,
not K models, whether the sources are local or on s3://. The output keeps the first source's file
layout (shards and header) and says in ``provenance.json`` what it was made from.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

import torch
from tqdm import tqdm

from olmocr.checkpoints.folders import (
    Checkpoint,
    Output,
    expand,
    file_hash,
    join,
    local_copy,
    model_source,
    provenance_of,
    resolve,
)
from olmocr.checkpoints.tensors import DTYPES, SafetensorsFile, WeightsHash, to_bytes, to_tensor
from olmocr.data.presented import copy_record
from olmocr.errors import UserError
from olmocr.utils.io import is_remote

log = logging.getLogger(__name__)


def _check_same_tensors(tables: list[dict], givens: list[str]) -> None:
    """Every source must have the first one's tensors, shapes and dtypes: one line naming the first
    tensor that differs otherwise."""
    first = tables[0]
    for i, table in enumerate(tables[1:], start=1):
        for name in sorted(set(first) | set(table)):
            if name not in table:
                raise UserError(f"sources[{i}]: {givens[i]} has no tensor {name} (sources[0] has it); "
                                "only checkpoints of one architecture can be souped")
            if name not in first:
                raise UserError(f"sources[{i}]: {givens[i]} has tensor {name}, which sources[0] has not; "
                                "only checkpoints of one architecture can be souped")
            a, b = first[name][1], table[name][1]
            if a.shape != b.shape:
                raise UserError(f"sources[{i}]: tensor {name} has shape {list(b.shape)}, sources[0]'s has "
                                f"{list(a.shape)}; only checkpoints of one architecture can be souped")
            if a.dtype != b.dtype:
                raise UserError(f"sources[{i}]: tensor {name} is {b.dtype}, sources[0]'s is {a.dtype}; "
                                "save the sources in one dtype")


def _combine(name: str, entry, datas: list[bytearray], weights: list[float]):
    if len(datas) == 1:
        return datas[0]
    if not entry.floating:
        for i, data in enumerate(datas[1:], start=1):
            if data != datas[0]:
                raise UserError(f"sources[{i}]: tensor {name} ({entry.dtype}) differs from sources[0]'s; only "
                                "floating-point tensors are averaged, others must be equal")
        return datas[0]
    total = None
    for weight, data in zip(weights, datas):
        tensor = to_tensor(data, entry).to(torch.float32)
        if weight != 1.0:
            tensor.mul_(weight)
        total = tensor if total is None else total.add_(tensor)
    return to_bytes(total.div_(sum(weights)).to(DTYPES[entry.dtype]))


def stream_weights(sources: list[Checkpoint], weights: list[float], out: Output) -> tuple[str, list[str]]:
    """Write the weighted mean of the sources' weights into ``out``; the content hashes of the output
    and of each source (:class:`WeightsHash`). Readers fetch (and hash) the next tensor of every source
    and a writer hashes and writes the previous result while the current tensor is averaged."""
    layouts = [{name: SafetensorsFile(src.fs, join(src.path, name)) for name in src.weight_files()}
               for src in sources]
    tables = [{name: (f, f.entries[name]) for f in layout.values() for name in f.entries} for layout in layouts]
    _check_same_tensors(tables, [s.given for s in sources])
    hashes, out_hash = [WeightsHash() for _ in sources], WeightsHash()
    order = [(file_name, entry) for file_name, first in layouts[0].items() for entry in first.in_file_order()]
    bar = tqdm(total=sum(entry.end - entry.begin for _, entry in order), unit="B", unit_scale=True, desc="weights")
    handle: dict = {}

    def read(i: int, name: str) -> bytearray:
        file, entry = tables[i][name]
        data = file.read(name)
        hashes[i].add(entry, data)
        return data

    def write(file_name: str, entry, data) -> None:
        if file_name not in handle:  # the next file: the first source's header, then its tensors in order
            for previous in handle.values():
                previous.close()
            handle.clear()
            handle[file_name] = out.open(file_name)
            handle[file_name].write(layouts[0][file_name].header_bytes)
        out_hash.add(entry, data)
        handle[file_name].write(data)
        bar.update(entry.end - entry.begin)

    # Averaging is memory-bound: leave the cores to the readers and the writer, which hash.
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, min(threads, (os.cpu_count() or 1) - len(sources) - 1)))
    try:
        with ThreadPoolExecutor(len(sources)) as readers, ThreadPoolExecutor(1) as writer:
            def fetch(index: int) -> list:
                return [readers.submit(read, i, order[index][1].name) for i in range(len(sources))] \
                    if index < len(order) else []

            pending, written = fetch(0), None
            for index, (file_name, entry) in enumerate(order):
                datas = [future.result() for future in pending]
                pending = fetch(index + 1)
                merged = _combine(entry.name, entry, datas, weights)
                if written is not None:
                    written.result()  # one result in flight: bounded memory, tensors in file order
                written = writer.submit(write, file_name, entry, merged)
            if written is not None:
                written.result()
    except BaseException:
        for opened in handle.values():
            out.discard(opened)
        raise
    finally:
        torch.set_num_threads(threads)
        for opened in handle.values():
            opened.close()
        bar.close()
        for layout in layouts:
            for f in layout.values():
                f.close()
    return out_hash.hexdigest(), [h.hexdigest() for h in hashes]


def _base_checkpoint(given: str, key: str, wait_s: float) -> Checkpoint:
    """The base model of an adapter: a folder (local or remote), or a hub id (fetched)."""
    from olmocr.models.source import HUB_ID

    local = os.path.expanduser(given)
    if not is_remote(given) and not os.path.isdir(local) and HUB_ID.match(given) and not given.startswith("."):
        from huggingface_hub import snapshot_download

        try:
            local = snapshot_download(given, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.jinja"])
        except Exception as exc:  # noqa: BLE001 - no network, no such repo: one line
            raise UserError(f"{key}: cannot fetch {given} from the Hugging Face Hub "
                            f"({str(exc).splitlines()[0]}); give {key}=<local folder>") from None
        given = local
    base = resolve(given, key=key, wait_s=wait_s)
    if base.kind != "full":
        raise UserError(f"{key}: {given} is an adapter, not a full model")
    return base


def merge_adapter(adapter: Checkpoint, base: str | None, work: str, key: str,
                  wait_s: float = 0.0) -> tuple[Checkpoint, dict]:
    """Merge a LoRA adapter into its base (``merge_and_unload``) and save the result in ``work``."""
    from peft import PeftModel

    from olmocr.models.source import HubModel, save_model

    config = adapter.config()
    base_given = base or config.get("base_model_name_or_path")
    if not base_given:
        raise UserError(f"{key}: {adapter.given}'s adapter_config.json names no base model; give base=<folder>")
    base_key = "base" if base else f"{key} (its adapter's base model)"
    base_checkpoint = _base_checkpoint(base_given, base_key, wait_s)
    base_local = Checkpoint(base_given, local_copy(base_checkpoint, os.path.join(work, "base")), "full")
    adapter_local = Checkpoint(adapter.given, local_copy(adapter, os.path.join(work, "adapter")), "adapter")
    source = model_source(base_local.path, base_key)
    log.info("merging the adapter %s into %s", adapter.given, base_given)
    model = PeftModel.from_pretrained(source.load_model(), adapter_local.path).merge_and_unload()
    processor_from = adapter_local if adapter_local.has_processor() else base_local
    processor = HubModel(processor_from.path, family=source.family.name).load_processor()
    merged = os.path.join(work, "merged")
    save_model(model, processor, merged)
    del model
    copy_record(adapter_local.path, merged)  # how the adapter's pages were presented
    info = {"adapter_weights_sha256": file_hash(adapter_local),
            "base": {"given": base_given, "checkpoint": base_checkpoint.path, "weights_sha256": file_hash(base_local)}}
    return Checkpoint(adapter.given, merged, "full", adapter.step), info


def _copy_release_files(first: Checkpoint, out: Output, processor: str | None, work: str) -> list[str]:
    names = first.release_files()
    for name in names:
        with first.fs.open(join(first.path, name), "rb") as src, out.open(name) as dst:
            dst.write(src.read())
    if first.has_processor():
        return names
    from transformers import AutoProcessor

    folder = os.path.join(work, "processor")
    try:
        AutoProcessor.from_pretrained(processor).save_pretrained(folder)
    except (OSError, ValueError) as exc:
        raise UserError(f"processor: cannot load a processor from {processor}: {str(exc).splitlines()[0]}") from None
    added = sorted(os.listdir(folder))
    for name in added:
        out.put(os.path.join(folder, name), name)
    return sorted(set(names) | set(added))


def check_weights(sources: list[str], weights: list[float] | None) -> list[float]:
    if not sources:
        raise UserError("sources: give at least one checkpoint, sources=[<run dir or folder>, …]")
    if weights is None:
        return [1.0] * len(sources)
    if len(weights) != len(sources):
        raise UserError(f"weights: {len(weights)} weights for {len(sources)} sources (one per source)")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise UserError(f"weights: expected non-negative weights with a positive sum, got {list(weights)}")
    return list(weights)


def prepare(sources: list[str], output: str, weights: list[float] | None = None, step: int | None = None,
            base: str | None = None, processor: str | None = None, overwrite: bool = False,
            storage_wait_s: float = 0.0) -> dict:
    """Make ``output`` a self-contained Hugging Face folder from ``sources``; returns its provenance. Remote
    storage that does not answer is waited out for up to ``storage_wait_s`` at each read and write."""
    sources = expand(sources, storage_wait_s)
    weights = check_weights(sources, weights)
    resolved = [resolve(given, step, key=f"sources[{i}]", wait_s=storage_wait_s) for i, given in enumerate(sources)]
    for i, checkpoint in enumerate(resolved):
        log.info("sources[%d]: %s (%s%s)", i, checkpoint.path, checkpoint.kind,
                 f", step {checkpoint.step}" if checkpoint.step is not None else "")
        if len(resolved) > 1 and checkpoint.kind == "full" and "quantization_config" in checkpoint.config():
            raise UserError(f"sources[{i}]: {checkpoint.given} is quantized; soup before compressing")
    if resolved[0].kind == "full" and not resolved[0].has_processor() and processor is None:
        raise UserError(f"sources[0]: {sources[0]} has no processor files (processor_config.json or "
                        "preprocessor_config.json, and tokenizer.json); give processor=<folder or hub id>")
    out = Output(output, overwrite, storage_wait_s)
    try:
        with tempfile.TemporaryDirectory(prefix="olmocr-prepare-") as work:
            full, merges = [], []
            for i, checkpoint in enumerate(resolved):
                info = None
                if checkpoint.kind == "adapter":
                    checkpoint, info = merge_adapter(checkpoint, base, os.path.join(work, str(i)), f"sources[{i}]",
                                                     storage_wait_s)
                full.append(checkpoint)
                merges.append(info)
            architectures = {tuple(c.config().get("architectures") or ()) for c in full}
            if len(architectures) > 1:
                raise UserError(f"sources: architectures differ ({', '.join(map(str, sorted(architectures)))})")
            output_hash, hashes = stream_weights(full, weights, out)
            files = _copy_release_files(full[0], out, processor, work)
    except BaseException:
        out.abort()
        raise
    operation = "soup" if len(sources) > 1 else "merge" if merges[0] else "copy"
    record = provenance_of(
        operation=operation, output=out.path, weights_sha256=output_hash, files=files,
        sources=[{"given": given, "checkpoint": checkpoint.path, "kind": checkpoint.kind, "step": checkpoint.step,
                  "weight": weight / sum(weights), "weights_sha256": digest,
                  **(merge or {}), "provenance": checkpoint.provenance()}
                 for given, checkpoint, weight, digest, merge in zip(sources, resolved, weights, hashes, merges)],
    )
    with out.open("provenance.json") as fh:
        fh.write(json.dumps(record, indent=2).encode())
    out.commit()
    log.info("%s of %d source(s) written to %s (weights sha256 %s)", operation, len(sources), out.path,
             output_hash[:16])
    return record
