"""algo=dpo: trl's DPOTrainer on preference pairs through the same entry point, loader, data steps,
optimizer, scheduler, callbacks, run dir and resume as SFT and GRPO."""

from __future__ import annotations

import glob
import json
import os

import pytest
import torch
from conftest import COMPILE, SAMPLE, compiling
from safetensors.torch import load_file

from olmocr.config import compose


def easy_pairs(path: str) -> str:
    """The bundled training pages with an easy preference: chosen reads the page once and stops,
    rejected runs on repeating it."""
    from olmocr.data.bench_prompts import bench_pages

    pages, _ = bench_pages(os.path.join(SAMPLE, "train"))
    with open(path, "w") as fh:
        for page in sorted(pages, key=lambda p: p["page_id"]):
            text = "---\nprimary_language: en\n---\nA page."
            fh.write(json.dumps({"page_id": page["page_id"], "pdf_path": page["pdf_path"], "page": page["page"],
                                 "chosen": text, "rejected": text + " A page." * 12}) + "\n")
        fh.write(json.dumps({"page_id": "none", "pdf_path": "x.pdf", "page": 1, "chosen": None,
                             "why": "rewards within the margin"}) + "\n")
        # A sampled answer that spells out an image placeholder: skipped and reported, never trained on.
        page = pages[0]
        fh.write(json.dumps({"page_id": "spelled", "pdf_path": page["pdf_path"], "page": page["page"],
                             "chosen": "A page.", "rejected": "A <|image_pad|> page."}) + "\n")
    return path


def dpo(tmp_path, overrides: list[str], name: str = "run"):
    from olmocr.train.__main__ import run

    out = str(tmp_path / name)
    pairs = easy_pairs(str(tmp_path / "pairs.jsonl"))
    # dpo_tiny's bench evals run through the same trainer bridge as GRPO's (tested there)
    return run(compose("train", ["+experiment=dpo_tiny", f"data.train=[{pairs}]", "trainer.eval_interval=null",
                                 "checkpoint.keep_best=null", *overrides]), out), out


def rows(out: str) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, open(os.path.join(out, "metrics.jsonl"))) if r["kind"] == "train"}


@pytest.mark.integration
def test_dpo_trains_on_pairs_and_resumes_exactly(tmp_path, cache_dir):
    overrides = ["trainer.max_duration.value=4", "checkpoint.interval=2"]
    full, full_out = dpo(tmp_path, overrides, "full")
    metrics = rows(full_out)
    assert sorted(metrics) == [1, 2, 3, 4]
    assert {"train/loss", "train/rewards/margins", "train/rewards/accuracies"} <= set(metrics[1])
    assert metrics[1]["train/loss"] == pytest.approx(0.6931, abs=1e-3)  # policy == reference at the start
    assert metrics[4]["train/loss"] < metrics[1]["train/loss"]
    assert os.path.exists(os.path.join(full_out, "plots", "preference.png"))
    skipped = [json.loads(line) for line in open(os.path.join(full_out, "rejected.jsonl"))]
    assert [(r["reason"], "<|image_pad|>" in r["detail"]) for r in skipped] == [("control_token", True)]
    first, out = dpo(tmp_path, overrides + ["trainer.hard_stop.value=2"], "split")
    assert first["state"]["step"] == 2
    second, _ = dpo(tmp_path, overrides, "split")
    assert second["state"]["step"] == 4 and sorted(rows(out)) == [1, 2, 3, 4]
    for step in (3, 4):
        assert rows(out)[step]["train/loss"] == pytest.approx(metrics[step]["train/loss"], abs=1e-6)
    a = load_file(os.path.join(full["checkpoint"], "model.safetensors"))
    b = load_file(os.path.join(second["checkpoint"], "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    # SIGTERM mid-run: the Hugging Face Trainer's run stops after the step under way, saved though not due.
    step, out = stopped_by_sigterm(tmp_path, overrides)
    saved = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "checkpoints", "checkpoint-*")))
    assert saved == ["checkpoint-2"] * (step >= 2) + [f"checkpoint-{step}"] * (step != 2)  # step 2 was due
    third, _ = dpo(tmp_path, overrides, "signalled")
    assert third["state"]["step"] == 4 and sorted(rows(out)) == [1, 2, 3, 4]
    assert all(rows(out)[s]["train/loss"] == pytest.approx(metrics[s]["train/loss"], abs=1e-6) for s in (3, 4))


def stopped_by_sigterm(tmp_path, overrides: list[str]) -> tuple[int, str]:
    """A run sent SIGTERM (in this process, as a scheduler's stop reaches it) once its first step is logged: the
    step it stopped after, and the run dir."""
    import re
    import signal
    import threading

    from olmocr.faults import Stopped

    metrics = tmp_path / "signalled" / "metrics.jsonl"

    ended = threading.Event()

    def send() -> None:
        while not (metrics.exists() and '"train"' in metrics.read_text()):
            if ended.wait(0.02):  # the run ended without a step: nothing to stop
                return
        os.kill(os.getpid(), signal.SIGTERM)

    # Should the run end before the signal lands (the test then fails), it meets this handler, not the test process.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    sender = threading.Thread(target=send, daemon=True)
    try:
        sender.start()
        with pytest.raises(Stopped) as stop:
            dpo(tmp_path, overrides, "signalled")
    finally:
        ended.set()
        sender.join(timeout=5)
        signal.signal(signal.SIGTERM, previous)
    out = str(tmp_path / "signalled")
    said = re.fullmatch(rf"stopped by SIGTERM at step (\d+), saved as {re.escape(out)}/checkpoints/checkpoint-(\d+); "
                        r"the same command resumes from it", str(stop.value))
    assert said and said[1] == said[2] and stop.value.signum == signal.SIGTERM, str(stop.value)
    return int(said[1]), out


def test_pair_pages_are_made_when_read_and_a_page_that_fails_is_replaced_and_reported_once(tmp_path):
    """Made up front, 10,000 pairs' pages held ~40 GB (1288 px) on every rank before the first step."""
    from omegaconf import OmegaConf

    from olmocr.data.preference import build_preference_dataset

    path = easy_pairs(str(tmp_path / "pairs.jsonl"))
    lines = open(path).read().splitlines()
    broken = json.loads(lines[0]) | {"page_id": "gone", "pdf_path": str(tmp_path / "gone.pdf")}
    with open(path, "w") as fh:
        fh.write("\n".join([json.dumps(broken), *lines * 50]) + "\n")
    steps = OmegaConf.to_container(compose("train", ["+experiment=dpo_tiny", f"data.train=[{path}]"]).data.steps,
                                   resolve=True)
    report = tmp_path / "rejected.jsonl"
    dataset = build_preference_dataset([path], steps, ["<|image_pad|>"], str(report))
    usable = 1 + 50 * (len(lines) - 2)  # the broken pair, and each copy's pairs but the pageless and the spelled one
    assert len(dataset) == usable and dataset.data.nbytes < 100 * usable  # an index per row, no page
    first, again = dataset[0], dataset[0]  # the broken pair's row: the next pair's page stands in
    assert first["page_id"] == json.loads(lines[0])["page_id"] and again["page_id"] == first["page_id"]
    assert max(first["images"][0].size) == 256 and first["prompt"][0]["role"] == "user"
    rejected = [json.loads(line) for line in open(report)]
    assert [r["reason"] for r in rejected] == ["control_token"] * 50 + [rejected[-1]["reason"]]
    assert rejected[-1]["pdf"] == str(tmp_path / "gone.pdf")  # once, though read twice


def test_dpo_config_errors_name_the_key_before_any_model_loads(tmp_path):
    from olmocr.train.__main__ import run

    pairs = easy_pairs(str(tmp_path / "pairs.jsonl"))
    for override, match in [("algo.loss_type=best", "algo.loss_type"), ("algo.beta=0", "algo.beta"),
                            ("+algo.trl_args.no_such_option=1", "no_such_option"),
                            ("+algo.trl_args.precompute_ref_log_probs=true",
                             r"^algo.trl_args.precompute_ref_log_probs: trl precomputes the reference's "
                             r"log-probabilities for text only, not for pages")]:
        with pytest.raises(ValueError, match=match):
            run(compose("train", ["+experiment=dpo_tiny", f"data.train=[{pairs}]", override]), str(tmp_path / "x"))
    with pytest.raises(ValueError, match="does not exist"):
        run(compose("train", ["+experiment=dpo_tiny", f"data.train=[{tmp_path}/missing.jsonl]"]), str(tmp_path / "y"))
    assert not glob.glob(str(tmp_path / "x" / "checkpoints" / "*"))


def test_dpo_with_lora_trains_the_adapter_against_the_base(tmp_path, cache_dir):
    result, out = dpo(tmp_path, ["finetune=lora", "trainer.max_duration.value=3", "checkpoint.interval=3",
                                 "optimizer.lr=1e-3"])
    metrics = rows(out)
    assert metrics[1]["train/loss"] == pytest.approx(0.6931, abs=1e-3) and metrics[3]["train/loss"] < 0.69
    assert os.path.exists(os.path.join(result["checkpoint"], "adapter_model.safetensors"))
    assert not os.path.exists(os.path.join(result["checkpoint"], "model.safetensors"))


@pytest.mark.integration
def test_compiled_blocks_train_lora_against_the_disabled_adapter(tmp_path, cache_dir):
    """trainer.compile compiles the blocks, as in SFT (not trl's whole-model compile, which recompiled the vision
    tower at every window count). The policy's blocks and the reference's (the same blocks, adapter off, no
    grad) take five graphs however many layers there are: the first layer's input needs no grad (the
    embeddings are frozen) and the others' does, and the adapter's first switch off and on is a new one."""
    with compiling(recompile_limit=5) as compiled:
        result, out = dpo(tmp_path, ["finetune=lora", *COMPILE, "trainer.max_duration.value=2", "checkpoint.interval=null"])
    assert compiled and sorted(rows(out)) == [1, 2]
    assert rows(out)[1]["train/loss"] == pytest.approx(0.6931, abs=1e-3)  # policy == reference at the start


@pytest.mark.integration
@pytest.mark.parametrize("algo", ["sft", "dpo"])
def test_loader_workers_leave_the_jobs_signals_to_the_trainer(tmp_path, cache_dir, algo):
    """A scheduler's requeue sends SIGTERM to every process of the job and a preemption notice SIGUSR1/2: the
    loader workers of our loop (SFT) and of Hugging Face's Trainer (DPO) ignore them, also one that arrives
    as a worker starts (the trainer decides), and the run goes on."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from olmocr.config import PROJECT_ROOT

    recipe = (["data.steps.render.longest_side=256"] if algo == "sft" else
              ["+experiment=dpo_tiny", f"data.train=[{easy_pairs(str(tmp_path / 'pairs.jsonl'))}]"])
    out, log = tmp_path / "run", tmp_path / "run.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "olmocr.train", *recipe, "trainer.num_workers=1",
                                 "trainer.max_duration.value=6", "trainer.eval_interval=null",
                                 "checkpoint.interval=null", "checkpoint.keep_best=null", "callbacks.plots=null",
                                 f"hydra.run.dir={out}"], cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=err)
    trainer, signalled = psutil.Process(proc.pid), set()
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        try:  # forked by the trainer: its command line (not its name: torch renames it)
            workers = [p for p in trainer.children() if p.cmdline() == trainer.cmdline() and p.pid not in signalled]
        except psutil.NoSuchProcess:
            continue
        for worker in workers:  # the moment it appears; the scheduler's signals for the job reach it too
            for sig in (signal.SIGUSR2, signal.SIGTERM):
                try:
                    worker.send_signal(sig)
                except psutil.NoSuchProcess:
                    pass
            signalled.add(worker.pid)
        time.sleep(0.05)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    assert signalled, "the trainer started no loader worker"
    assert sorted(rows(str(out))) == [1, 2, 3, 4, 5, 6]


def test_a_diverging_run_under_the_hugging_face_trainer_stops_as_our_loop_does(tmp_path, caplog):
    """trl's trainers apply every update and save whatever they hold: the bridge keeps a step whose gradients
    are not finite from being applied or saved, and stops the run as tests/test_train.py's loop does."""
    with pytest.raises(ValueError, match=r"^step 4: loss \S+, gradient norm nan; 3 steps in a row, none applied: "
                                         r"training diverged and stops before saving anything of it; the newest "
                                         r"checkpoint is of step 1: lower optimizer.lr"):
        dpo(tmp_path, ["optimizer.lr=1e9", "trainer.max_duration.value=8", "checkpoint.interval=1"])
    assert caplog.text.count("its update was not applied") == 2
    checkpoints = tmp_path / "run" / "checkpoints"
    assert sorted(n for n in os.listdir(checkpoints) if n.startswith("checkpoint-")) == ["checkpoint-1"]
    weights = load_file(checkpoints / "checkpoint-1" / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values())


def test_to_divergence_scores_each_pair_up_to_its_first_differing_token(processor):
    """trl's own collator on the tiny model's processor; the pair's tokens after the first difference (the
    rejected answer's end among them) leave the loss, everything before stays in it."""
    from PIL import Image
    from trl.trainer.dpo_trainer import DataCollatorForVisionPreference

    from olmocr.train.dpo import ToDivergence

    def row(chosen: str, rejected: str) -> dict:
        return {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Read it."}]}],
                "images": [Image.new("RGB", (56, 56), "white")],
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": rejected}]}

    rows = [row("Small computed price.", "Small compted price."), row("A page.", "A page. A page. A page.")]
    collate = DataCollatorForVisionPreference(processor)
    whole = collate([dict(r) for r in rows])
    cut = ToDivergence(collate)([dict(r) for r in rows])
    assert torch.equal(cut["input_ids"], whole["input_ids"])  # the tokens are the same; what is scored is not
    ids, before, after = whole["input_ids"], whole["completion_mask"], cut["completion_mask"]
    for pair in range(len(rows)):
        chosen, rejected = pair, pair + len(rows)
        differ = (ids[chosen] != ids[rejected]).nonzero()
        first = int(differ[(before[chosen] + before[rejected])[differ[:, 0]] > 0][0])
        for side in (chosen, rejected):
            assert torch.equal(after[side][: first + 1], before[side][: first + 1])  # kept, the difference too
            assert not after[side][first + 1:].any()  # nothing after it
            assert before[side][first + 1:].any()  # which trl's collator scored
    # The second pair differs where the chosen answer ends and the rejected runs on: its end is what is scored.
    tokenizer = processor.tokenizer
    end = int(after[1].nonzero().max())
    assert tokenizer.decode(ids[1][end]) == "<|im_end|>" and tokenizer.decode(ids[3][end]).strip() == "A"
