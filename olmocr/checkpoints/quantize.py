"""One-shot quantisation of a released model with llmcompressor: Linear layers of the language model
only, ``lm_head`` and the vision tower left as they are.

transformers saves a Qwen2.5-VL's vision tower as ``visual.*`` but names it ``model.visual.*`` once
loaded, so the ignore list written into ``config.json`` is given both forms of every name; with one
form only, a reload would quantise the vision tower it never calibrated.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

from olmocr.data.presented import copy_record
from olmocr.errors import UserError

log = logging.getLogger(__name__)


def scheme_of(name: str):
    """The llmcompressor preset ``name`` (``FP8_DYNAMIC``, ``FP8``, ``FP8_BLOCK``, ``W8A16``, …)."""
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES, preset_name_to_scheme

    if name.upper() not in PRESET_SCHEMES:
        raise UserError(f"scheme: unknown scheme {name!r} (expected one of {', '.join(sorted(PRESET_SCHEMES))})")
    return preset_name_to_scheme(name.upper(), ["Linear"])


def needs_calibration(name: str) -> bool:
    """Static activation scales are measured on data; dynamic ones and weight-only schemes need none."""
    activations = scheme_of(name).input_activations
    return activations is not None and activations.dynamic is not True


def calibration_loader(pages: list[dict], processor):
    """Rendered pages as llmcompressor's ``oneshot`` reads them: one page's processor tensors per batch,
    made when the page is read (the pixel values of hundreds of 1288 px pages would not fit in memory)."""
    from torch.utils.data import DataLoader

    from olmocr.checkpoints.pages import model_inputs

    class Pages:
        def __len__(self):
            return len(pages)

        def __getitem__(self, index):
            return dict(model_inputs(processor, pages[index]))

    return DataLoader(Pages(), batch_size=None)


def both_forms(names: list[str]) -> list[str]:
    out = list(names)
    for name in names:
        twin = name[len("model."):] if name.startswith("model.visual.") else \
            "model." + name if name.startswith("visual.") else None
        if twin is not None and twin not in out:
            out.append(twin)
    return out


def quantize(model, processor, folder: str, scheme: str, ignore: list[str], calibration=None) -> None:
    """Quantise ``model`` in place and save it (compressed) with its processor to ``folder``."""
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier

    recipe = QuantizationModifier(targets="Linear", scheme=scheme.upper(), ignore=list(ignore))
    if calibration is None:
        oneshot(model=model, recipe=recipe)
    else:
        oneshot(model=model, recipe=recipe, dataset=calibration)
    model.save_pretrained(folder, save_compressed=True)
    processor.save_pretrained(folder)
    path = os.path.join(folder, "config.json")
    with open(path) as fh:
        config = json.load(fh)
    quantization = config["quantization_config"]
    quantization["ignore"] = both_forms(quantization.get("ignore") or [])
    with open(path, "w") as fh:
        json.dump(config, fh, indent=2)


def compress(source: str, output: str, scheme: str = "FP8_DYNAMIC", ignore: list[str] = (), step: int | None = None,
             calibration: dict | None = None, steps: dict | None = None, overwrite: bool = False,
             report_path: str | None = None, storage_wait_s: float = 0.0) -> dict:
    """Quantise the model ``source`` names into ``output`` (a folder, local or remote); returns its
    provenance. ``calibration`` ({root, count, seed}) and ``steps`` give the pages a static scheme
    measures activations on. Remote storage that does not answer is waited out for up to ``storage_wait_s``
    at each read and write."""
    from olmocr.checkpoints.folders import (Checkpoint, Output, file_hash, local_copy, model_source, provenance_of,
                                           resolve)
    from olmocr.checkpoints.pages import choose_pages, render_pages

    calibrate = needs_calibration(scheme)
    if calibrate and (calibration or {}).get("count", 0) < 1:
        raise UserError(f"calibration.count: scheme {scheme} measures activation scales on pages; give "
                        "calibration.count=<pages> (and calibration.root=<folder>)")
    resolved = resolve(source, step, key="source", wait_s=storage_wait_s)
    if resolved.kind != "full":
        raise UserError(f"source: {source} is a LoRA adapter; merge it first (python -m olmocr.prepare)")
    if "quantization_config" in resolved.config():
        raise UserError(f"source: {source} is already quantized")
    out = Output(output, overwrite, storage_wait_s)
    try:
        with tempfile.TemporaryDirectory(prefix="olmocr-compress-") as work:
            local = Checkpoint(source, local_copy(resolved, os.path.join(work, "source")), "full")
            loader = model_source(local.path, "source")
            processor = loader.load_processor()
            pages = []
            if calibrate:
                chosen = choose_pages(calibration["root"], calibration["count"], calibration.get("seed", 0))
                pages = render_pages(chosen, steps or {}, report_path)
                log.info("calibrating on %d pages of %s", len(pages), calibration["root"])
            folder = os.path.join(work, "compressed")
            quantize(loader.load_model(), processor, folder, scheme, list(ignore),
                     calibration_loader(pages, processor) if calibrate else None)
            copy_record(local.path, folder)  # how the model's pages are presented
            compressed = Checkpoint(output, folder, "full")
            size = {"before": sum(local.files()[f] for f in local.weight_files()),
                    "after": sum(compressed.files()[f] for f in compressed.weight_files())}
            record = provenance_of(
                operation="compress", output=out.path, scheme=scheme.upper(), ignore=list(ignore),
                calibration_pages=[p["page_id"] for p in pages], weights_bytes=size,
                weights_sha256=file_hash(compressed),
                sources=[{"given": source, "checkpoint": resolved.path, "kind": "full", "step": resolved.step,
                          "weights_sha256": file_hash(local), "provenance": resolved.provenance()}])
            with open(os.path.join(folder, "provenance.json"), "w") as fh:
                json.dump(record, fh, indent=2)
            # provenance.json last: a remote folder without it is an unfinished upload
            for name in sorted(os.listdir(folder), key=lambda n: n == "provenance.json"):
                out.put(os.path.join(folder, name), name)
    except BaseException:
        out.abort()
        raise
    out.commit()
    log.info("%s: weights %.1f MB -> %.1f MB (%.2fx smaller); written to %s", scheme.upper(), size["before"] / 1e6,
             size["after"] / 1e6, size["before"] / max(size["after"], 1), out.path)
    return record
