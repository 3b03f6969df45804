"""The reader reads: a guard on everything between a page and the loss. Image tokens that do not stand for their
pixels, a label mask that trains on the prompt or hides the text, a prompt or image size that differ between
the training samples and the held-out ones: each leaves a model that does no better with its page than with
another, and fails here."""

from __future__ import annotations

import os
import random

import pytest
import torch

from olmocr.config import compose

# 600 steps of 8 over 1,600 pages: each page seen three times, rendered once (the render cache), which takes a
# quarter off the test's time against 8,000 pages seen once each (and the margin below is wider: 0.33 to 0.25).
STEPS, PAGES = 600, 1600
# Nats a label token. A model that does not look at its page does exactly as well with another page's image;
# this one, on a 2-core AMD EPYC: 0.590 with its own page, 0.923 with the next page's, 1.345 with a blank one.
# (At 450 steps the two first differ by 0.04, at 300 by 0.005: the reader starts looking near step 600.)
MARGIN = 0.05


def held_out_samples(processor, pdfs: list[str], steps: dict) -> list[dict]:
    from olmocr.data.chain import build_pipeline

    pipeline = build_pipeline(steps, processor=processor)
    return [pipeline({"pdf_path": pdf, "md_path": pdf[:-4] + ".md", "rng": random.Random(0)}) for pdf in pdfs]


def mean_loss(model, processor, samples: list[dict]) -> float:
    """Mean next-token loss over the samples' label tokens."""
    import torch.nn.functional as F

    from olmocr.data.steps import IGNORE_INDEX
    from olmocr.train.collate import Collator, model_inputs

    collate, total, tokens = Collator(processor.tokenizer.pad_token_id), 0.0, 0
    with torch.no_grad():
        for start in range(0, len(samples), 8):
            batch = collate(samples[start:start + 8])
            logits = model(**model_inputs(batch), use_cache=False).logits
            labels = batch["labels"][:, 1:]
            total += float(F.cross_entropy(logits[:, :-1].flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                                           reduction="sum"))
            tokens += int((labels != IGNORE_INDEX).sum())
    return total / tokens


@pytest.mark.integration
def test_after_a_short_run_the_reader_does_better_with_its_page_than_with_another(tmp_path, cache_dir):
    """+experiment=read_tiny for 600 steps on 1,600 line pages of bank words alone (the recipe's other pages, random
    letters and paragraphs, take the reader longer to start looking). Its held-out loss with each page's own image
    is below its loss with the next page's image (as much ink, other letters: the prior over words and the front
    matter are worth the same on both) and with a blank one, by a clear margin. The reader's held-out loss leaves
    its blind twin's near step 600 (docs/reading.md): a change that delays that fails here too."""
    from omegaconf import OmegaConf

    import olmocr.synth.__main__ as synth
    from olmocr.config import build
    from olmocr.train.__main__ import run

    root = tmp_path / "reading"
    for part, args in (("train", [f"num_pages={PAGES}", "reading_words=seen"]),
                       ("heldout", ["num_pages=32", "seed=11", "reading_words=all", "category=bank"])):
        synth.run(compose("synth", ["reading=line", *args, f"out_dir={root / part}"]), str(tmp_path / f"synth_{part}"))
    out = str(tmp_path / "run")
    cfg = compose("train", ["+experiment=read_tiny", f"paths.reading={root}", f"paths.cache={cache_dir}",
                            "~data.train.letters", "~data.train.mixed", "~data.train.lines", "data.train.reading.weight=1",
                            "eval.bench=null", "checkpoint.keep_best=null", f"trainer.max_duration.value={STEPS}",
                            "trainer.eval_interval=null", f"checkpoint.interval={STEPS}", "callbacks.plots=null"])
    run(cfg, out)
    source = build(cfg.model)
    model = source.load_model(path=os.path.join(out, "checkpoints", f"step_{STEPS:06d}", "model")).eval()
    processor = source.load_processor()
    steps = OmegaConf.to_container(cfg.data.steps, resolve=True)
    bank = [str(p) for p in sorted((root / "heldout" / "pdfs").glob("bank_*.pdf"))]
    samples = held_out_samples(processor, bank, steps)
    # Each page's prompt and target with the next page's image: as much ink, in the same place, but other letters.
    # (Line pages are all one size, so every image is the same number of tokens.)
    swapped = [{**s, "pixel_values": samples[(i + 1) % len(samples)]["pixel_values"]} for i, s in enumerate(samples)]
    blank = held_out_samples(processor, bank, {
        **steps, "blind": {"_target_": "olmocr.data.steps.BlankImage", "_after_": "render"}})
    seeing, other, blind = (mean_loss(model, processor, s) for s in (samples, swapped, blank))
    print(f"held-out loss a label token: own page {seeing:.3f}, next page's {other:.3f}, blank {blind:.3f}")  # -s
    assert len(samples) == 32 and other - seeing > MARGIN and blind - seeing > MARGIN, (seeing, other, blind)
