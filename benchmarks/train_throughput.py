"""Training throughput: our loop against a plain transformers.Trainer, same tiny model, data and batch.

    python benchmarks/train_throughput.py [--steps 30] [--batch-size 2] [--repeats 3] [--longest-side 512]

Samples are tokenised once up front and served from memory, so both loops measure the training step,
not rendering. Both start from the same weights and use AdamW at the same lr without clipping
differences (max_grad_norm 1.0 in both). Reports the median tokens/s (label tokens) of --repeats runs
and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.data import Dataset

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from olmocr.config import compose  # noqa: E402
from olmocr.data.dataset import build_datasets  # noqa: E402
from olmocr.models import TinyModel  # noqa: E402
from olmocr.train.checkpoint import CheckpointManager  # noqa: E402
from olmocr.train.collate import Collator, model_inputs  # noqa: E402
from olmocr.train.optim import adamw  # noqa: E402
from olmocr.train.schedules import constant  # noqa: E402
from olmocr.train.trainer import Trainer  # noqa: E402


class InMemory(Dataset):
    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]

    def set_epoch(self, epoch):
        pass


def load_samples(longest_side: int, processor, count: int) -> list[dict]:
    from omegaconf import OmegaConf

    cfg = compose("train", [f"data.steps.render.longest_side={longest_side}"])
    data = OmegaConf.to_container(cfg.data, resolve=True)
    train, _, _ = build_datasets(data["train"], {}, data["steps"], processor=processor)
    samples = [s for s in (train[i] for i in range(len(train))) if s is not None]
    keep = ("input_ids", "attention_mask", "labels", "mm_token_type_ids", "pixel_values", "image_grid_thw")
    return [{k: v for k, v in s.items() if k in keep} for s in (samples * (count // len(samples) + 1))[:count]]


def ours(source, processor, samples, steps, batch_size, lr, work) -> float:
    torch.manual_seed(0)
    model = source.load_model()
    optimizer = adamw(model, lr=lr, weight_decay=0.0)
    trainer = Trainer(model, processor, optimizer, constant(optimizer, steps), InMemory(samples), {},
                      Collator(processor.tokenizer.pad_token_id), CheckpointManager(os.path.join(work, "ckpt")), [],
                      stop_step=steps, batch_size=batch_size, grad_accum=1, precision="fp32",
                      clip_grad_norm=1.0, eval_interval=None, save_interval=None, num_workers=0, seed=0,
                      device=torch.device("cpu"))
    trainer.save = lambda: None  # measure training steps only
    start = time.perf_counter()
    state = trainer.fit()
    return state.tokens / (time.perf_counter() - start)


def hf_trainer(source, processor, samples, steps, batch_size, lr, work) -> float:
    from transformers import Trainer as HFTrainer
    from transformers import TrainingArguments

    torch.manual_seed(0)
    model = source.load_model()
    collate = Collator(processor.tokenizer.pad_token_id)

    def collator(batch):
        out = collate(batch)
        return {**model_inputs(out), "labels": out["labels"]}

    args = TrainingArguments(output_dir=os.path.join(work, "hf"), per_device_train_batch_size=batch_size,
                             max_steps=steps, learning_rate=lr, lr_scheduler_type="constant", weight_decay=0.0,
                             max_grad_norm=1.0, logging_steps=10_000, save_strategy="no", report_to=[],
                             use_cpu=True, remove_unused_columns=False, dataloader_num_workers=0, seed=0,
                             disable_tqdm=True)
    trainer = HFTrainer(model=model, args=args, train_dataset=InMemory(samples), data_collator=collator)
    tokens = sum(int((s["labels"][1:] != -100).sum()) for s in samples[: steps * batch_size])
    start = time.perf_counter()
    trainer.train()
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--longest-side", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    work = tempfile.mkdtemp(prefix="olmocr-train-bench-")
    source = TinyModel(cache_dir=os.path.join(work, "models"))
    processor = source.load_processor()
    samples = load_samples(args.longest_side, processor, args.steps * args.batch_size)
    mean_len = statistics.mean(len(s["input_ids"]) for s in samples)
    print(f"tiny {source.family.name}, {len(samples)} samples (mean {mean_len:.0f} tokens), batch {args.batch_size}, "
          f"{args.steps} steps, CPU threads {torch.get_num_threads()}")
    results = {"ours": [], "transformers.Trainer": []}
    for _ in range(args.repeats):
        results["ours"].append(ours(source, processor, samples, args.steps, args.batch_size, args.lr, work))
        results["transformers.Trainer"].append(
            hf_trainer(source, processor, samples, args.steps, args.batch_size, args.lr, work))
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, value in medians.items():
        print(f"{name:22s} {value:8.0f} label tokens/s (runs: {', '.join(f'{v:.0f}' for v in results[name])})")
    print(f"ratio ours / transformers.Trainer: {medians['ours'] / medians['transformers.Trainer']:.2f}x")


if __name__ == "__main__":
    main()
