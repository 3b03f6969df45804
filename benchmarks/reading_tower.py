"""How fast a vision tower learns which characters its image tokens hold, on typeset reading pages (issue 79's
question: can the reader's tower learn glyphs that sit anywhere, at any size, in any typeface?).

    python benchmarks/reading_tower.py [--pages 2000] [--heldout 256] [--steps 2000] [--eval-every 250]
                                       [--configs frozen reader wide deep patch7 fast stem cnn] [--kind typeset]

Each config is a Qwen2.5-VL vision tower built from random weights (``reader``: the reader's own, 4 blocks of 128,
patches of 14 pixels merged into tokens of 28) with a small MLP head on its tokens, taught with no language model
in between: for each image token, which characters have their centre in its 28-pixel cell (one to four on a
typeset page), from where the generator drew each glyph (``olmocr.synth.layout.glyph_boxes``). Training pages are
typeset lines and paragraphs of mixed words (``reading_type=typeset``, seeds 31 and 32); held-out pages are other
seeds (41, 42). ``frozen`` keeps the tower at its random weights and trains the head alone: the control, what the
features of a tower nothing taught already tell. ``--kind grid`` is the sanity check: on the patch grid the frozen
tower's tokens tell their two characters at once (F1 near 1 within a few hundred steps). ``stem`` replaces the
tower's linear patch embedding with a small convolutional net over the whole page, pooled to the patch grid
(:func:`conv_stem`): what a glyph's strokes look like is learnt once for every place they stand. ``cnn`` is that
net alone, pooled to the token grid and read by the head with no tower: what the convolutions learn by themselves.
Both are scored as a served model would run them, their BatchNorm by its running statistics.

Prints, per config and eval: steps, seconds a step, held-out character F1 over tokens (each character in a token's
set a prediction) and the share of tokens holding characters whose set is exactly right, and the same F1 on as many
of the training pages (what the tower fits against what it generalises: far above the held-out F1, more pages or
augmentation is the lever; level with it, the tower or its optimisation); then one row per config.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

CHARS = [chr(c) for c in range(33, 127)] + ["\u201c", "\u201d"]
INDEX = {c: i for i, c in enumerate(CHARS)}
CONFIGS = {"frozen": {"frozen": True}, "reader": {}, "wide": {"hidden": 256}, "deep": {"depth": 8},
           "patch7": {"patch": 7, "merge": 4}, "fast": {"lr": 3e-3}, "stem": {"stem": "patches"},
           "cnn": {"stem": "tokens"}}


def pages(kind: str, seed: int, level: str, count: int) -> list[tuple]:
    """(pixels, page size in points, [(char index, left, right, centre y)]) of ``count`` reading pages."""
    import numpy as np

    from olmocr.formats.render import render_page
    from olmocr.synth.layout import draw, glyph_boxes, place
    from olmocr.synth.reading import ReadingPageGenerator

    words = "mixed" if kind == "typeset" else "letters"
    generator = ReadingPageGenerator(seed, level, words, kind=kind)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(count):
            page = generator.describe(index)
            placed = place(page)
            pdf = os.path.join(tmp, "page.pdf")
            draw(page, placed, pdf)
            glyphs = [(INDEX[c], x0, x1, (y0 + y1) / 2) for c, (x0, y0, x1, y1) in glyph_boxes(page, placed)
                      if c in INDEX]
            out.append((np.asarray(render_page(pdf, 1, 448, page_size=page.page_size)), page.page_size, glyphs))
    return out


def conv_stem(hidden: int, patch: int, merge: int, grid: str):
    """A convolutional net in place of a tower's linear patch embedding (``grid="patches"``: one feature a patch,
    in the processor's order) or of the whole tower (``"tokens"``: one a merged token, row by row)."""
    import torch
    from torch import nn

    def block(cin: int, cout: int) -> list:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    class ConvStem(nn.Module):
        def __init__(self):
            super().__init__()
            # After three 3 x 3 layers at a quarter of the resolution a feature sees 34 pixels, a glyph and its edges, before
            # the pooling to the grid: the pooled feature says which glyph is near, wherever in the cell it stands.
            self.body = nn.Sequential(*block(3, 16), nn.MaxPool2d(2), *block(16, 32), nn.MaxPool2d(2),
                                      *block(32, 64), *block(64, 64), *block(64, 96))
            self.top = nn.Sequential(*block(96, 128), nn.Conv2d(128, hidden, 1))
            self.grid_thw = None  # set by the tower's forward pre-hook (the patches alone do not say the image's shape)

        def forward(self, patches):
            out, at = [], 0
            for t, h, w in self.grid_thw.tolist():
                count = t * h * w
                # the processor's rows: (t, h/merge, w/merge, merge, merge) patches of (channel, frame, y, x)
                x = patches[at:at + count].view(t, h // merge, w // merge, merge, merge, 3, 2, patch, patch)[..., 0, :, :]
                image = x.permute(0, 5, 1, 3, 6, 2, 4, 7).reshape(t, 3, h * patch, w * patch)
                cells = (h, w) if grid == "patches" else (h // merge, w // merge)
                f = self.top(nn.functional.adaptive_max_pool2d(self.body(image), cells))
                if grid == "patches":  # back to the processor's order
                    f = f.view(t, hidden, h // merge, merge, w // merge, merge).permute(0, 2, 4, 3, 5, 1)
                else:
                    f = f.permute(0, 2, 3, 1)
                out.append(f.reshape(-1, hidden))
                at += count
            return torch.cat(out)

    return ConvStem()


class Probe:
    def __init__(self, hidden: int = 128, depth: int = 4, patch: int = 14, merge: int = 2, lr: float = 1e-3,
                 frozen: bool = False, target: str = "centre", stem: str | None = None):
        import torch
        from torch import nn
        from transformers import Qwen2VLImageProcessor
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

        from olmocr.models.families import FAMILIES

        torch.manual_seed(0)
        family = FAMILIES["qwen2_5_vl"]
        self.patch, self.merge, self.frozen, self.target = patch, merge, frozen, target
        self.processor = Qwen2VLImageProcessor(size={"shortest_edge": 3136, "longest_edge": 448 * 448},
                                               patch_size=patch, merge_size=merge, temporal_patch_size=2,
                                               image_mean=list(family.image_mean), image_std=list(family.image_std))
        self.tower = Qwen2_5_VisionTransformerPretrainedModel(Qwen2_5_VLVisionConfig(
            depth=depth, hidden_size=hidden, num_heads=4, patch_size=patch, spatial_merge_size=merge,
            temporal_patch_size=2, out_hidden_size=128, intermediate_size=2 * hidden,
            fullatt_block_indexes=[depth - 1], window_size=112))
        self.cnn = None
        if stem == "patches":
            self.tower.patch_embed = conv_stem(hidden, patch, merge, "patches")
            self.tower.register_forward_pre_hook(self.grid_of(self.tower.patch_embed), with_kwargs=True)
        elif stem == "tokens":
            self.cnn = self.tower = conv_stem(128, patch, merge, "tokens")
        self.head = nn.Sequential(nn.LayerNorm(128), nn.Linear(128, 512), nn.GELU(), nn.Linear(512, len(CHARS)))
        params = list(self.head.parameters()) + ([] if frozen else list(self.tower.parameters()))
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        # a token holds a few of ~100 characters: positives weigh more, or the head learns to say none
        self.weight = torch.full((len(CHARS),), 10.0)

    @staticmethod
    def grid_of(stem):
        def hook(module, args, kwargs):
            stem.grid_thw = kwargs["grid_thw"] if "grid_thw" in kwargs else args[1]
        return hook

    def features(self, pixels, grids):
        if self.cnn is not None:
            self.cnn.grid_thw = grids
            return self.cnn(pixels)
        out = self.tower(pixels, grid_thw=grids)
        return getattr(out, "pooler_output", out)

    def encode(self, batch: list[tuple]):
        """Pixel patches, grid sizes and each token's multi-hot target of the pages of ``batch``."""
        import torch

        pixels, grids, targets = [], [], []
        cell = self.patch * self.merge
        for image, (width, height), glyphs in batch:
            inputs = self.processor(images=[image], return_tensors="pt")
            _, rows_p, cols_p = (int(v) for v in inputs["image_grid_thw"][0])
            rows, cols = rows_p // self.merge, cols_p // self.merge
            sx, sy = cols_p * self.patch / width, rows_p * self.patch / height  # points to the resized pixels
            target = torch.zeros(rows, cols, len(CHARS))
            for index, left, right, cy in glyphs:
                r = int(cy * sy // cell)
                if not 0 <= r < rows:
                    continue
                if self.target == "centre":  # the one cell its centre is in
                    columns = [int((left + right) / 2 * sx // cell)]
                else:  # every cell that holds at least 40% of its width
                    x0, x1 = left * sx, right * sx
                    columns = [c for c in range(int(x0 // cell), int(x1 // cell) + 1)
                               if min(x1, (c + 1) * cell) - max(x0, c * cell) >= 0.4 * (x1 - x0)]
                for c in columns:
                    if 0 <= c < cols:
                        target[r, c, index] = 1
            pixels.append(inputs["pixel_values"])
            grids.append(inputs["image_grid_thw"])
            targets.append(target.reshape(-1, len(CHARS)))
        return torch.cat(pixels), torch.cat(grids), torch.cat(targets)

    def logits(self, pixels, grids):
        return self.head(self.features(pixels, grids))

    def step(self, batch) -> float:
        import torch

        pixels, grids, target = self.encode(batch)
        with torch.set_grad_enabled(not self.frozen):
            features = self.features(pixels, grids)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(self.head(features), target,
                                                                    pos_weight=self.weight)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss)

    def score(self, encoded) -> tuple[float, float]:
        """(character F1 over tokens, share of tokens with characters whose set is exactly right)."""
        import torch

        tp = fp = fn = exact = holding = 0
        self.tower.eval()
        with torch.no_grad():
            for pixels, grids, target in encoded:
                guess = (self.logits(pixels, grids) > 0).float()
                tp += float((guess * target).sum())
                fp += float((guess * (1 - target)).sum())
                fn += float(((1 - guess) * target).sum())
                full = target.sum(-1) > 0
                holding += int(full.sum())
                exact += int(((guess == target).all(-1) & full).sum())
        self.tower.train()
        return 2 * tp / max(2 * tp + fp + fn, 1), exact / max(holding, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000, help="training pages, half lines, half paragraphs")
    parser.add_argument("--heldout", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--kind", choices=("typeset", "grid"), default="typeset")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--target", choices=("centre", "overlap"), default="centre",
                        help="a token holds the characters whose centre is in its cell, or each with 40%% of its width in the cell")
    args = parser.parse_args()
    began = time.perf_counter()
    train = pages(args.kind, 31, "line", args.pages // 2) + pages(args.kind, 32, "lines", args.pages - args.pages // 2)
    held = pages(args.kind, 41, "line", args.heldout // 2) + pages(args.kind, 42, "lines", args.heldout - args.heldout // 2)
    print(f"{len(train)} training and {len(held)} held-out {args.kind} pages rendered in "
          f"{time.perf_counter() - began:.0f} s", flush=True)
    rows = []
    for name in args.configs:
        probe = Probe(**CONFIGS[name], target=args.target)
        encoded = [probe.encode(held[i:i + 16]) for i in range(0, len(held), 16)]
        fitted = train[:len(held) // 2] + train[len(train) - (len(held) - len(held) // 2):]  # lines and paragraphs, as held
        seen = [probe.encode(fitted[i:i + 16]) for i in range(0, len(fitted), 16)]
        rng = random.Random(0)
        spent, curve = 0.0, []
        for step in range(1, args.steps + 1):
            start = time.perf_counter()
            loss = probe.step([train[rng.randrange(len(train))] for _ in range(args.batch)])
            spent += time.perf_counter() - start
            if step % args.eval_every == 0 or step == args.steps:
                f1, exact = probe.score(encoded)
                fit, _ = probe.score(seen)
                curve.append(f"{f1:.3f}")
                print(f"{name:8s} step {step:5d}  {spent / step:.2f} s/step  loss {loss:.4f}  held-out F1 {f1:.3f}  "
                      f"exact tokens {exact:.3f}  training pages' F1 {fit:.3f}", flush=True)
        rows.append((name, args.steps, spent / args.steps, f1, exact, fit, " ".join(curve)))
    print(f"\n{'config':8s} {'steps':>6s} {'s/step':>7s} {'F1':>6s} {'exact':>6s} {'fit':>6s}  F1 at each eval")
    for name, steps, per_step, f1, exact, fit, curve in rows:
        print(f"{name:8s} {steps:6d} {per_step:7.2f} {f1:6.3f} {exact:6.3f} {fit:6.3f}  {curve}")


if __name__ == "__main__":
    main()
