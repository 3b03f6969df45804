"""Training throughput: our loop against a plain transformers.Trainer, same model, data and batch.

    python benchmarks/train_throughput.py [--steps 30] [--batch-size 2] [--repeats 3] [--longest-side 512]
    python benchmarks/train_throughput.py --arch qwen25_vl_7b --device cuda --precision bf16 \
        --longest-side 1288 --batch-size 1 --steps 10 --activation-checkpointing --peak-tflops 989

Samples are tokenised once up front and served from memory, so both loops measure the training step,
not rendering. Both start from the same weights and use AdamW at the same lr with the same clipping.
Reports the median label tokens/s of --repeats runs and the ratio; with --peak-tflops also the model
FLOPs utilisation (6·N per token for the language model and the vision tower, plus the attention term).
``--arch qwen25_vl_7b`` builds the Qwen2.5-VL-7B architecture with random weights (nothing downloaded):
throughput does not depend on the weights' values.
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
from olmocr.train.checkpoint import CheckpointManager, Checkpointing  # noqa: E402
from olmocr.train.collate import Collator, model_inputs  # noqa: E402
from olmocr.train.distributed import DistInfo  # noqa: E402
from olmocr.train.optim import adamw  # noqa: E402
from olmocr.train.schedules import constant  # noqa: E402
from olmocr.train.schema import TrainerConfig  # noqa: E402
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


QWEN25_VL_7B = {  # the published Qwen2.5-VL-7B-Instruct architecture
    "text_config": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                    "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                    "max_position_embeddings": 128000, "rms_norm_eps": 1e-6,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}},
    "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                      "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                      "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2},
}


def make_model(arch: str, source, processor, device: str, dtype: torch.dtype):
    torch.manual_seed(0)
    if arch == "tiny":
        return source.load_model(device).to(dtype)
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tok = processor.tokenizer
    config = Qwen2_5_VLConfig(**QWEN25_VL_7B, image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
                              video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
                              vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
                              vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"))
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model


def ours(model, processor, samples, steps, batch_size, lr, work, device, precision) -> float:
    optimizer = adamw(model, lr=lr, weight_decay=0.0)
    settings = TrainerConfig(batch_size=batch_size, grad_accum=1, precision=precision, clip_grad_norm=1.0,
                             eval_interval=None, num_workers=0)
    trainer = Trainer(model, processor, optimizer, constant(optimizer, steps), InMemory(samples), {},
                      Collator(processor.tokenizer.pad_token_id),
                      CheckpointManager(os.path.join(work, "ckpt"), Checkpointing(interval=None)), [],
                      settings, stop_step=steps, seed=0, dist=DistInfo(0, 1, 0, torch.device(device)))
    trainer.save = lambda: None  # measure training steps only
    synchronize(device)
    start = time.perf_counter()
    state = trainer.fit()
    synchronize(device)
    return state.tokens / (time.perf_counter() - start)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def flops_per_label_token(model, samples) -> float:
    """6·N per processed token (LM) and per patch (vision), plus 12·layers·hidden·seq for attention."""
    vision = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    text = sum(p.numel() for p in model.parameters()) - vision
    cfg = model.config.text_config
    total = 0.0
    for s in samples:
        seq = len(s["input_ids"])
        patches = int(s["image_grid_thw"].prod(-1).sum())
        total += 6 * text * seq + 6 * vision * patches + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq * seq
    labels = sum(int((s["labels"][1:] != -100).sum()) for s in samples)
    return total / labels


def hf_trainer(model, processor, samples, steps, batch_size, lr, work, device, precision) -> float:
    from transformers import Trainer as HFTrainer
    from transformers import TrainingArguments

    collate = Collator(processor.tokenizer.pad_token_id)

    def collator(batch):
        out = collate(batch)
        return {**model_inputs(out), "labels": out["labels"]}

    args = TrainingArguments(output_dir=os.path.join(work, "hf"), per_device_train_batch_size=batch_size,
                             max_steps=steps, learning_rate=lr, lr_scheduler_type="constant", weight_decay=0.0,
                             max_grad_norm=1.0, logging_steps=10_000, save_strategy="no", report_to=[],
                             use_cpu=device == "cpu", bf16=precision == "bf16", remove_unused_columns=False,
                             dataloader_num_workers=0, seed=0, disable_tqdm=True)
    trainer = HFTrainer(model=model, args=args, train_dataset=InMemory(samples), data_collator=collator)
    tokens = sum(int((s["labels"][1:] != -100).sum()) for s in samples[: steps * batch_size])
    synchronize(device)
    start = time.perf_counter()
    trainer.train()
    synchronize(device)
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=["tiny", "qwen25_vl_7b"], default="tiny")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--longest-side", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers.Trainer baseline")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's dense peak for --precision (H100/H200 bf16: 989) to report MFU")
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)
    work = tempfile.mkdtemp(prefix="olmocr-train-bench-")
    big = args.arch != "tiny"
    # The 7B path keeps the tiny tokenizer (any ids below its vocabulary are valid) and lets the image
    # processor keep 1288 px pages whole, as the production processor does.
    source = TinyModel(cache_dir=os.path.join(work, "models"),
                       image_max_pixels=(args.longest_side ** 2) if big else 256 * 256)
    processor = source.load_processor()
    samples = load_samples(args.longest_side, processor, args.steps * args.batch_size)
    mean_len = statistics.mean(len(s["input_ids"]) for s in samples)
    dtype = torch.bfloat16 if args.precision == "bf16" and big else torch.float32
    print(f"{args.arch} on {args.device} ({args.precision}), {len(samples)} samples (mean {mean_len:.0f} tokens), "
          f"batch {args.batch_size}, {args.steps} steps")
    loops = {"ours": ours} if args.no_hf else {"ours": ours, "transformers.Trainer": hf_trainer}
    results: dict[str, list[float]] = {name: [] for name in loops}
    flops = None
    for _ in range(args.repeats):
        for name, loop in loops.items():
            model = make_model(args.arch, source, processor, args.device, dtype)
            if args.activation_checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            flops = flops or flops_per_label_token(model, samples)
            results[name].append(loop(model, processor, samples, args.steps, args.batch_size, args.lr, work,
                                      args.device, args.precision))
            del model
            if args.device == "cuda":
                torch.cuda.empty_cache()
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, value in medians.items():
        line = f"{name:22s} {value:10.0f} label tokens/s (runs: {', '.join(f'{v:.0f}' for v in results[name])})"
        if args.peak_tflops:
            line += f"  MFU {100 * value * flops / (args.peak_tflops * 1e12):.1f}%"
        print(line)
    if len(medians) == 2:
        print(f"ratio ours / transformers.Trainer: {medians['ours'] / medians['transformers.Trainer']:.2f}x")


if __name__ == "__main__":
    main()
