"""SFT on the tiny model, on CPU, for real steps."""

import gc
import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch
from conftest import COMPILE, SAMPLE, compiling

from olmocr.config import PROJECT_ROOT, compose

EXPECTED = os.path.join(os.path.dirname(__file__), "expected", "tiny_sft_losses.json")
# Plots are drawn where they are the point (test_bench_eval, test_grpo).
FAST = ["data.steps.render.longest_side=256", "trainer.eval_interval=null", "trainer.batch_size=2", "callbacks.plots=null"]


def train(tmp_path, overrides, name="run"):
    from olmocr.train.__main__ import run

    out = str(tmp_path / name)
    cfg = compose("train", FAST + overrides)
    return run(cfg, out), out


def losses(out, kind="train"):
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    return {r["step"]: r["train/loss"] for r in rows if r["kind"] == kind}


def test_loss_falls_and_matches_stored_losses(tmp_path, cache_dir):
    result, out = train(tmp_path, ["trainer.max_duration.value=30", "checkpoint.interval=null"])
    got = losses(out)
    assert len(got) == 30 and result["state"]["step"] == 30
    first, last = sum(got[s] for s in range(1, 6)) / 5, sum(got[s] for s in range(26, 31)) / 5
    assert last < first - 0.5, (first, last)
    expected = json.load(open(EXPECTED))
    for step, value in expected.items():
        assert got[int(step)] == pytest.approx(value, abs=2e-3), step
    # The final checkpoint is a normal Hugging Face model that reloads and generates.
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    path = os.path.join(result["checkpoint"], "model")
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path)
    processor = AutoProcessor.from_pretrained(path)
    from PIL import Image

    messages = [{"role": "user", "content": [{"type": "text", "text": "Read."}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=[Image.new("RGB", (200, 260), "white")], return_tensors="pt")
    assert model.generate(**inputs, max_new_tokens=5, do_sample=False).shape[1] == inputs["input_ids"].shape[1] + 5


def test_fsdp_in_one_process_trains_to_the_stored_losses_and_ends_its_process_group(tmp_path, cache_dir):
    # Started on its own (no torchrun), it failed after the model loaded: FSDP's mesh wanted torchrun's variables.
    import torch.distributed as dist

    result, out = train(tmp_path, ["trainer.max_duration.value=30", "trainer.hard_stop.value=3",
                                   "checkpoint.interval=null", "strategy=fsdp"])
    expected = json.load(open(EXPECTED))
    assert result["state"]["step"] == 3 and not dist.is_initialized()
    for step, value in losses(out).items():
        assert value == pytest.approx(expected[str(step)], abs=2e-3), step



def test_padding_batch_equals_two_single_batches(processor, tiny):
    from conftest import SAMPLE, v4_steps
    from olmocr.data.dataset import build_datasets
    from olmocr.train.collate import Collator
    from olmocr.train.trainer import Trainer

    train_data, _, _ = build_datasets({"s": {"roots": [os.path.join(SAMPLE, "train", "pdfs")]}}, {},
                                      v4_steps(256), processor=processor)
    a, b = train_data[0], train_data[3]
    assert len(a["input_ids"]) != len(b["input_ids"])
    collate = Collator(processor.tokenizer.pad_token_id)
    trainer = Trainer.__new__(Trainer)
    trainer.model, trainer.device, trainer.autocast_dtype = tiny.load_model(), torch.device("cpu"), None
    pair = trainer.loss_sum(collate([a, b]))
    single = trainer.loss_sum(collate([a])) + trainer.loss_sum(collate([b]))
    assert pair.item() == pytest.approx(single.item(), rel=1e-5)
    batch = collate([a, None, b])
    assert batch["drawn"] == 3 and batch["size"] == 2
    assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()


@pytest.mark.integration
def test_kill_and_resume_equals_uninterrupted(tmp_path, cache_dir, caplog):
    """Also with bench evals (their decoding leaves the training RNG streams alone) and the saves keep_best adds."""
    common = ["trainer.max_duration.value=10", "checkpoint.interval=5", "optimizer=muon", "optimizer.lr=0.01",
              "optimizer.adam_lr=1e-3", "finetune.freeze_vision=true", "trainer.eval_interval=4",
              "checkpoint.keep_best=eval/bench/overall"]
    _, straight = train(tmp_path, common, "straight")
    # hard_stop halts at step 5 with the schedule of a 10-step run, as a killed job would.
    first, resumed = train(tmp_path, common + ["trainer.hard_stop.value=5"], "resumed")
    assert first["state"]["step"] == 5
    with open(os.path.join(resumed, "metrics.jsonl"), "a") as fh:  # a kill as a line was written: it is torn
        fh.write('{"kind": "train", "step": 6, "train/lo')
    caplog.set_level("INFO", logger="olmocr.train")
    second, _ = train(tmp_path, common, "resumed")
    assert second["state"]["step"] == 10
    # The one value this invocation changed is said in one line, as the checkpoint's record of its config has it.
    checkpoint = os.path.join(resumed, "checkpoints", "step_000005")
    assert f"resuming from {checkpoint} with 1 value(s) changed since it was written: trainer.hard_stop.value: " \
           "5.0 → null" in caplog.text
    a, b = losses(straight), losses(resumed)
    assert sorted(b) == list(range(1, 11))
    for step in range(1, 11):
        assert b[step] == pytest.approx(a[step], abs=1e-6), step
    evals = {run: {r["step"]: r for r in map(json.loads, open(os.path.join(run, "metrics.jsonl"))) if r["kind"] == "eval"}
             for run in (straight, resumed)}
    assert sorted(evals[straight]) == sorted(evals[resumed]) == [4, 8]
    for step in (4, 8):
        assert evals[resumed][step]["eval/bench/overall"] == evals[straight][step]["eval/bench/overall"]
    best = [json.load(open(os.path.join(run, "checkpoints", "step_000010", "best.json"))) for run in (straight, resumed)]
    assert best[0] == best[1] and best[0]["step"] in (4, 8)


@pytest.mark.integration
def test_ctrl_c_to_one_rank_stops_every_rank_after_the_same_step_and_the_run_resumes_to_the_stored_losses(tmp_path,
                                                                                                        cache_dir):
    """Ctrl-C reaches one rank of a two-process run (and its loader worker, which is deaf to it): the ranks agree
    to stop when the step under way ends, with a checkpoint of it though none was due, each saying so in one
    line; the same command then finishes with the losses of the stored one-process run (batch 2 = 2 ranks x 1), its
    first 10 steps."""
    import signal

    import psutil
    from conftest import TWO_RANKS, stored_losses

    run = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
               "-m", "olmocr.train", *TWO_RANKS, "trainer.hard_stop.value=10", "checkpoint.interval=null",
               "trainer.num_workers=1", f"hydra.run.dir={run}"]
    env = {**os.environ, "OLMOCR_CACHE": cache_dir, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal
    try:
        while proc.poll() is None and (not (run / "metrics.jsonl").exists()
                                       or open(run / "metrics.jsonl").read().count('"train"') < 3):
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-3000:]  # ended before its third step
        rank1 = next(p for p in psutil.Process(proc.pid).children() if p.environ().get("RANK") == "1")
        for target in [rank1, *rank1.children()]:  # the rank and its loader worker, as a terminal's Ctrl-C reaches them
            target.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=180)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # (not anchored at the line's start: the other rank's progress bar, redrawn with \r, may end where a line begins)
    said = re.findall(rf"error: stopped by SIGINT at step (\d+), saved as {re.escape(str(run))}/checkpoints/"
                      r"step_(\d+); the same command resumes from it$", err, re.M)
    assert proc.returncode != 0 and len(said) == 2 and said[0] == said[1], err[-3000:]  # rank 0 stopped too
    step = int(said[0][0])
    assert 3 <= step == int(said[0][1]) < 10 and os.listdir(run / "checkpoints") == [f"step_{step:06d}"]
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    got, want = losses(str(run)), stored_losses()
    assert sorted(got) == list(range(1, 11))
    assert all(got[s] == pytest.approx(want[s], abs=1e-4) for s in got)


def test_resume_false_refuses_to_overwrite(tmp_path, cache_dir):
    train(tmp_path, ["trainer.max_duration.value=2", "checkpoint.interval=1"], "once")
    with pytest.raises(ValueError, match="holds checkpoints"):
        train(tmp_path, ["trainer.max_duration.value=2", "checkpoint.resume=false"], "once")


def test_lora_trains_only_adapters_and_reloads(tmp_path, cache_dir, tiny):
    from peft import PeftModel

    result, out = train(tmp_path, ["finetune=lora", "optimizer.lr=1e-2", "trainer.max_duration.value=6",
                                   "checkpoint.interval=null"])
    adapter = os.path.join(result["checkpoint"], "model")
    assert os.path.exists(os.path.join(adapter, "adapter_model.safetensors"))
    assert not os.path.exists(os.path.join(adapter, "model.safetensors"))
    config = json.load(open(os.path.join(adapter, "adapter_config.json")))
    assert config["r"] == 8 and config["lora_alpha"] == 32
    base = tiny.load_model()
    reloaded = PeftModel.from_pretrained(base, adapter)
    names = [n for n, _ in reloaded.named_modules() if n.endswith("lora_A")]
    assert names and all("language_model" in n and "visual" not in n for n in names)
    # The adapter changed the model: its logits differ from the base model's.
    ids = torch.tensor([[1, 5, 9, 13]])
    with torch.no_grad():
        merged = reloaded.merge_and_unload()(input_ids=ids).logits
        plain = tiny.load_model()(input_ids=ids).logits
    assert not torch.allclose(merged, plain)


def test_full_finetune_with_frozen_vision_keeps_vision_weights(tmp_path, cache_dir, tiny):
    from safetensors.torch import load_file

    result, _ = train(tmp_path, ["finetune.freeze_vision=true", "trainer.max_duration.value=3",
                                 "checkpoint.interval=null"])
    before = load_file(os.path.join(tiny.path, "model.safetensors"))
    after = load_file(os.path.join(result["checkpoint"], "model", "model.safetensors"))
    # Saved files use the original checkpoint layout (visual.*, model.layers.*), not the in-memory names.
    vision = [k for k in before if k.startswith("visual.")]
    language = [k for k in before if k.startswith("model.layers.") and k.endswith("q_proj.weight")]
    assert vision and language
    assert all(torch.equal(before[k], after[k]) for k in vision)
    assert any(not torch.equal(before[k], after[k]) for k in language)


def test_epoch_and_token_durations(tmp_path, cache_dir):
    result, _ = train(tmp_path, ["trainer.max_duration={unit: epochs, value: 0.5}", "checkpoint.interval=null"])
    assert result["total_steps"] == 8  # 32 pages, 2 per step, half an epoch
    result, _ = train(tmp_path, ["trainer.max_duration={unit: tokens, value: 3000}", "checkpoint.interval=null"],
                      "tokens")
    assert 2 <= result["total_steps"] <= 20


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.integration
def test_two_process_gloo_ddp_fsdp_and_deepspeed_agree_and_resume(tmp_path, cache_dir, tiny):
    """One torchrun job of two processes runs a sweep: each strategy stops at step 2 (hard_stop, as a killed
    job would) and resumes to step 4 in the same job dir, all in the same process group. Replicated (DDP),
    sharded (FSDP2) and partitioned (DeepSpeed ZeRO-2) training give the same losses; the checkpoints hold
    the full, gathered weights. The bench eval at step 4, each rank decoding half the pages (FSDP's ranks
    in step), gives what one process gives on the same weights, output for output."""
    env = dict(os.environ, OLMOCR_CACHE=cache_dir, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
         "-m", "olmocr.train", "-m", "strategy=ddp,fsdp,deepspeed", "trainer.hard_stop.value=2,null", *FAST,
         "trainer.max_duration.value=4", "checkpoint.interval=2", "trainer.batch_size=1", "trainer.eval_interval=4",
         f"hydra.sweep.dir={tmp_path}/sweep"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # One dir per job, named by its overrides; hard_stop is not part of the name, so the resumed job is in it too.
    dirs = sorted(d for d in os.listdir(tmp_path / "sweep") if d != "multirun.yaml")
    assert len(dirs) == 3 and not any("hard_stop" in d for d in dirs)
    runs = {s: str(tmp_path / "sweep" / next(d for d in dirs if f"strategy={s}" in d.split(",")))
            for s in ("ddp", "fsdp", "deepspeed")}
    got = {}
    for strategy, run in runs.items():
        rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if '"train"' in line]
        assert [r["step"] for r in rows] == [1, 2, 3, 4], strategy  # stopped at 2, resumed at 3 (not restarted)
        assert all(r["train/samples"] == 2 for r in rows)  # one per rank per step
        got[strategy] = {r["step"]: r["train/loss"] for r in rows}
    for strategy in ("fsdp", "deepspeed"):
        assert all(got[strategy][s] == pytest.approx(got["ddp"][s], abs=1e-4) for s in got["ddp"]), strategy
    assert os.path.isdir(os.path.join(runs["deepspeed"], "checkpoints", "step_000002", "deepspeed", "optimizer"))
    from safetensors.torch import load_file

    weights = {s: load_file(os.path.join(run, "checkpoints", "step_000004", "model", "model.safetensors"))
               for s, run in runs.items()}
    for strategy in ("fsdp", "deepspeed"):
        a, b = weights["ddp"], weights[strategy]
        assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-4) for k in a), strategy
    from transformers import AutoProcessor

    from olmocr.config import build

    evals = {s: [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if '"eval"' in line]
             for s, run in runs.items()}
    assert all([r["step"] for r in rows] == [4] and "eval/bench/overall" in rows[0] for rows in evals.values())
    cfg = compose("train", [*FAST, "trainer.batch_size=1"])
    one = build(cfg.eval.bench, output_dir=str(tmp_path / "one")).load()
    folder = os.path.join(runs["ddp"], "checkpoints", "step_000004", "model")
    alone = one.evaluate(one.decoder(tiny.load_model(path=folder), AutoProcessor.from_pretrained(folder), torch.device("cpu")), 4)
    together = evals["ddp"][0]
    assert {k: v for k, v in alone.items() if k.startswith("eval/")} == \
        {k: v for k, v in together.items() if k.startswith("eval/bench/")}
    for path in glob.glob(str(tmp_path / "one" / "bench_eval" / "step_000004" / "candidates" / "*.md")):
        twin = os.path.join(runs["ddp"], "bench_eval", "step_000004", "candidates", os.path.basename(path))
        assert open(path).read() == open(twin).read()


def test_deepspeed_in_one_process(tmp_path, cache_dir):
    result, out = train(tmp_path, ["strategy=deepspeed", "trainer.max_duration.value=2",
                                   "checkpoint.interval=null"])
    expected = json.load(open(EXPECTED))
    assert losses(out)[1] == pytest.approx(expected["1"], abs=1e-4)
    assert os.path.isdir(os.path.join(result["checkpoint"], "deepspeed"))


def test_activation_checkpointing_gives_the_same_training(tmp_path, cache_dir):
    base = ["trainer.max_duration.value=3", "checkpoint.interval=null"]
    _, plain = train(tmp_path, base, "plain")
    _, ckpt = train(tmp_path, base + ["trainer.activation_checkpointing=true"], "ckpt")
    a, b = losses(plain), losses(ckpt)
    assert all(b[s] == pytest.approx(a[s], abs=1e-5) for s in a)


def test_an_unknown_compile_backend_is_refused_before_the_model_loads(tmp_path):
    with pytest.raises(ValueError, match=r"^trainer.compile_backend: 'inductr' is not a torch.compile backend here; "
                                         r"expected one of .*inductor.* or a debugging one \(aot_eager, eager\)$"):
        train(tmp_path, ["trainer.compile=true", "trainer.compile_backend=inductr", "model=qwen25_vl_7b",
                         f"model.name_or_path={tmp_path}/nonexistent"])  # a model that would fail to load


@pytest.mark.integration
def test_compile_trains(tmp_path, cache_dir):
    """Compiled blocks train to the stored losses, and a bench eval between steps decodes without recompiling
    them shape after shape (which ended at dynamo's recompile limit: an error here)."""
    expected = json.load(open(EXPECTED))
    with compiling() as compiled:
        result, out = train(tmp_path, [*COMPILE, "trainer.max_duration.value=2", "trainer.eval_interval=1",
                                       "checkpoint.interval=null"])
    assert compiled  # the blocks were compiled, by the backend trainer.compile_backend names
    # Step 1 only: Adam's first update is about lr * sign(gradient), so compiled kernels' last-bit differences in
    # tiny gradients move step 2's loss by a few 1e-3.
    assert losses(out)[1] == pytest.approx(expected["1"], abs=1e-3)
    evals = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [r["step"] for r in evals if "eval/bench/overall" in r] == [1, 2]


def test_wandb_offline_logs_without_secrets_and_a_resumed_run_continues_its_wandb_run(tmp_path, cache_dir,
                                                                                      monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", "secret-key-0123456789abcdef0123456789abcdef")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = ["logger=wandb", "trainer.max_duration.value=2", "checkpoint.interval=1"]
    train(tmp_path, [*run, "trainer.hard_stop.value=1"])
    _, out = train(tmp_path, run)  # continues from step 1
    with pytest.raises(ValueError) as info:  # before the model loads, like every trainer value
        train(tmp_path, [*run, "callbacks.wandb.mode=ofline"], "typo")
    assert str(info.value) == "callbacks.wandb.mode: expected one of online, offline, disabled, got 'ofline'"
    assert not os.path.exists(tmp_path / "typo" / "checkpoints")
    runs = sorted(glob.glob(os.path.join(out, "wandb", "offline-run-*")))
    run_id = open(os.path.join(out, "wandb_run_id")).read()
    assert len(runs) == 2 and all(r.endswith(f"-{run_id}") for r in runs), (run_id, runs)
    for root, _, files in os.walk(out):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                assert b"secret-key-0123456789abcdef" not in fh.read(), name
    # An offline run keeps its config and history in the run's .wandb file until `wandb sync`.
    record = open(glob.glob(os.path.join(runs[0], "run-*.wandb"))[0], "rb").read()
    assert b"grad_accum" in record and b"train/loss" in record


def test_wandb_online_without_its_server_is_one_line_before_the_model_loads(tmp_path, warm_python):
    """In a process of its own: wandb keeps its settings for the life of a process that has used it."""
    import socket

    with socket.socket() as closed:  # a port nothing listens on once this closes
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    env = {**os.environ, "WANDB_BASE_URL": url, "WANDB_MODE": "online", "WANDB_API_KEY": "k" * 40}
    proc = subprocess.run([warm_python, "-m", "olmocr.train", "logger=wandb", *FAST, f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error == (f"error: callbacks.wandb: cannot reach {url}: Connection refused (WANDB_BASE_URL or `wandb login "
                     "--host` names the server; WANDB_MODE=offline logs the run here for a later `wandb sync`; "
                     "logger=console logs to the console only)")
    assert "Traceback" not in proc.stderr and " - model " not in proc.stderr  # the model never loaded
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_a_wandb_server_that_takes_the_connection_and_never_answers_is_one_line_in_bounded_time(tmp_path):
    """A brownout: the port is open, nothing answers. wandb's own check would wait on its service process."""
    import socket

    from olmocr.train.callbacks import Wandb

    callback = Wandb(project="p", run_config={}, output_dir=str(tmp_path))
    callback.REACH_TIMEOUT_S = 1
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(ValueError, match=rf"^callbacks.wandb: cannot reach {url}: no answer within 1 s \("):
            callback._reach(url)


def test_data_that_cannot_be_read_stops_the_run_before_the_weights_load(tmp_path, tiny):
    """A checkpoint folder whose weights are gone: loading them would fail, and for a real model take minutes.
    A data folder that does not exist must be what the run reports, before the weights are read."""
    import shutil

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny.path, checkpoint)
    for weights in checkpoint.glob("*.safetensors"):
        weights.unlink()
    model = ["model=qwen25_vl_7b", f"model.name_or_path={checkpoint}", "model.dtype=float32"]
    with pytest.raises(ValueError, match=r"^data root '.*/nonexistent' is not a directory"):
        train(tmp_path, [*model, "data=folder", f"data.roots=[{tmp_path}/nonexistent]"])
    with pytest.raises(ValueError, match=rf"^model: cannot load {checkpoint}"):  # the weights are unreadable indeed
        train(tmp_path, [*model, "data=folder", f"data.roots=[{SAMPLE}/train/pdfs]"])


def test_profiler_writes_a_trace(tmp_path, cache_dir):
    _, out = train(tmp_path, ["+callbacks.profiler={_target_: olmocr.train.callbacks.Profiler, wait: 0, warmup: 1, "
                              "active: 1}", "trainer.max_duration.value=3", "checkpoint.interval=null"])
    assert glob.glob(os.path.join(out, "profile", "*.pt.trace.json"))


def test_a_full_disk_at_a_checkpoint_keeps_the_newest_and_says_so_in_one_line(small_disk, tiny):
    """The first checkpoint fits, the second finds the disk full: one line says where the write went, what is
    free there and which checkpoint is kept; the partial files are gone (their space back) and the kept one
    loads. torch's and safetensors' own writers, which the Hugging Face Trainer's checkpoints go through,
    lose the OS error; a full disk is still known from what they raise."""
    import shutil

    from safetensors.torch import save_file

    from olmocr.train.checkpoint import CheckpointManager, Checkpointing, complete_checkpoints, model_dir
    from olmocr.faults import NoSpace, no_space

    model, processor = tiny.load_model(), tiny.load_processor()
    state = {"optimizer": {name: torch.randn_like(p) for name, p in model.state_dict().items()}}
    root = small_disk.path / "checkpoints"
    manager = CheckpointManager(str(root), Checkpointing(keep_last=3))
    manager.begin(1)
    first = manager.commit(1, model, processor, state)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(first) for f in files)
    small_disk.leave(size // 2)  # room for half a checkpoint
    free = shutil.disk_usage(small_disk.path).free
    manager.begin(2)
    with pytest.raises(NoSpace) as caught:
        manager.commit(2, model, processor, state)
    message = str(caught.value)
    assert message.startswith(f"no space left on device writing {root / 'step_000002.partial'}"), message
    assert f"; checkpoint of step 2 not saved, its partial files removed; the newest kept is {first} (" in message
    assert message.endswith(" MB), which a run started again resumes from") and "\n" not in message
    assert os.listdir(root) == ["step_000001"] and list(complete_checkpoints(str(root))) == [1]
    assert shutil.disk_usage(small_disk.path).free >= free - 4096
    reloaded = tiny.load_model(path=model_dir(first))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))

    small_disk.leave(100)
    tensors = {"w": torch.zeros(100_000)}
    for name, write in [("torch.save of a path", lambda path: torch.save(tensors, path)),
                        ("safetensors", lambda path: save_file(tensors, path))]:
        with pytest.raises(Exception) as caught:  # noqa: PT011 - what each library raises is the point
            write(str(small_disk.path / "weights"))
        assert not isinstance(caught.value, OSError), name
        assert isinstance(no_space(caught.value), NoSpace), (name, caught.value)
    assert no_space(RuntimeError("size mismatch for lm_head.weight")) is None


@pytest.mark.integration
def test_training_data_in_s3_waits_out_an_outage_and_stops_in_one_line_on_refused_credentials(tmp_path, s3_server,
                                                                                               monkeypatch, caplog):
    """Pages read from S3 while training: an outage is waited out (data.storage_wait_s), no page dropped for
    it; credentials refused later stop the run with the page and the refusal, not a page skipped each step."""
    import threading

    import s3fs

    from olmocr.faults import Unreachable
    from support.faultproxy import FaultProxy

    fs = s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server})
    fs.mkdir("pages")
    fs.put(os.path.join(SAMPLE, "train", "pdfs") + "/", "pages/train/", recursive=True)
    out = tmp_path / "run"
    caplog.set_level("WARNING", logger="olmocr.io")
    with FaultProxy(s3_server, rate=0.0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)

        def steps_logged() -> int:
            return len(open(out / "metrics.jsonl").readlines()) if (out / "metrics.jsonl").exists() else 0

        def faults():
            while steps_logged() < 1:
                time.sleep(0.05)
            proxy.outage(20)  # longer than s3fs and botocore wait out by themselves
            while steps_logged() < 8:
                time.sleep(0.05)
            proxy.faults, proxy.methods, proxy.rate = ("access_denied",), {"GET"}, 1.0

        thread = threading.Thread(target=faults, daemon=True)
        thread.start()
        with pytest.raises(Unreachable) as caught:
            train(tmp_path, ["data=folder", "data.roots=[s3://pages/train]", "data.eval_fraction=0", "data.storage_wait_s=120",
                             "trainer.max_duration.value=40", "checkpoint.interval=null"])
        thread.join(timeout=10)
    assert proxy.faulted()["outage"] > 0
    assert "the storage does not answer (EndpointConnectionError" in caplog.text
    assert "the storage answers again, after " in caplog.text
    assert re.fullmatch(r"s3://pages/train/\S+\.(md|pdf): the storage refused the credentials \(PermissionError: "
                        r"Access Denied\)", str(caught.value)), caught.value
    assert 8 <= steps_logged() < 40
    assert not (out / "rejected.jsonl").exists() or not open(out / "rejected.jsonl").read()


@pytest.mark.integration
def test_a_read_that_waits_past_its_patience_and_a_fault_raised_in_a_loader_worker_are_one_line(s3_server,
                                                                                                 monkeypatch):
    import s3fs
    from torch.utils.data import DataLoader

    from olmocr.faults import Unreachable
    from support.faultproxy import FaultProxy
    from olmocr.utils.io import read_bytes

    fs = s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server})
    fs.mkdir("pages")
    fs.pipe("pages/a.md", b"a")
    with FaultProxy(s3_server, rate=0.0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        assert read_bytes("s3://pages/a.md", wait_s=5) == b"a"
        proxy.outage(600)
        with pytest.raises(Unreachable, match=r"^s3://pages/a.md: the storage did not answer for \d+ s "
                                              r"\(EndpointConnectionError: [^\n]+\)$"):
            read_bytes("s3://pages/a.md", wait_s=1)

    class Refused(torch.utils.data.Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            raise Unreachable("s3://pages/a.md: the storage refused the credentials (PermissionError: Access Denied)")

    with pytest.raises(Unreachable) as caught:
        next(iter(DataLoader(Refused(), num_workers=1)))
    said = str(caught.value)
    # The traceback holds the loader's iterator, whose worker would otherwise end at some later collection (one
    # came at the worker's exit: a KeyboardInterrupt in its __del__, reported as an unraisable exception).
    del caught
    gc.collect()
    assert said == "s3://pages/a.md: the storage refused the credentials (PermissionError: Access Denied)"


def test_a_diverging_run_stops_in_one_line_before_saving_what_it_diverged_into(tmp_path, warm_python):
    """An absurd learning rate: after the first update the loss is NaN. Steps whose loss or gradients are not
    finite are not applied and nothing is saved meanwhile; three in a row stop the run, naming the newest
    checkpoint, which is from before. The error is the last line the command prints: the progress bar is
    closed before it (callbacks' on_exception), not drawn again after it when the process exits."""
    from safetensors.torch import load_file

    proc = subprocess.run([warm_python, "-m", "olmocr.train", *FAST, "optimizer.lr=1e9", "trainer.max_duration.value=10",
                           "checkpoint.interval=1", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.endswith(
        "]\nerror: step 4: loss nan, gradient norm nan; 3 steps in a row, none applied: training diverged and stops "
        "before saving anything of it; the newest checkpoint is of step 1: lower optimizer.lr (or "
        "trainer.clip_grad_norm) and run again to resume from it\n"), proc.stderr[-500:]
    assert proc.stdout.count("its update was not applied") == 2
    out = tmp_path / "run"
    assert os.listdir(out / "checkpoints") == ["step_000001"]
    weights = load_file(out / "checkpoints" / "step_000001" / "model" / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values())
    assert [round(v, 3) if v == v else "nan" for v in losses(str(out)).values()][1:] == ["nan"] * 3


def test_config_changes_name_every_value_added_gone_or_changed(tmp_path):
    from olmocr.train.checkpoint import config_changes, write_run_config

    assert config_changes(str(tmp_path), {"a": 1}) is None  # written before checkpoints kept their config
    write_run_config(str(tmp_path), {"optimizer": {"lr": 1e-3, "betas": [0.9, 0.95]}, "callbacks": {"wandb": None},
                                     "gone": "x", "same": {"deep": {"value": 2}}})
    now = {"optimizer": {"lr": 3e-3, "betas": [0.9, 0.99]}, "callbacks": {"wandb": {"mode": "offline"}},
           "same": {"deep": {"value": 2}}, "new": True}
    assert config_changes(str(tmp_path), now) == [
        "callbacks.wandb: null → (absent)", "callbacks.wandb.mode: (absent) → \"offline\"", "gone: \"x\" → (absent)",
        "new: (absent) → true", "optimizer.betas: [0.9, 0.95] → [0.9, 0.99]", "optimizer.lr: 0.001 → 0.003"]
    assert config_changes(str(tmp_path), {"optimizer": {"lr": 1e-3, "betas": [0.9, 0.95]}, "callbacks": {"wandb": None},
                                          "gone": "x", "same": {"deep": {"value": 2}}}) == []


@pytest.mark.integration
def test_a_run_dir_in_use_refuses_a_second_run_and_a_killed_run_leaves_it_free(tmp_path, cache_dir):
    """The same command in a second terminal, or a job submitted twice: both would resume from one checkpoint
    and write the same checkpoint names, each removing the other's half-written one."""
    import signal
    import socket

    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "olmocr.train", *FAST, "trainer.max_duration.value=500",
                              "checkpoint.interval=2", f"hydra.run.dir={out}"], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (out / "checkpoints" / "step_000002").exists():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        with pytest.raises(ValueError) as refused:
            train(tmp_path, ["trainer.max_duration.value=500", "checkpoint.interval=2"], "run")
        assert re.fullmatch(rf"{re.escape(str(out))} is in use by another run \(pid \d+ on {re.escape(socket.gethostname())}, since "
                            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\): wait for it to end, or give this one its own "
                            r"run_name \(or hydra.run.dir\)", str(refused.value)), refused.value
        # From the command line, refused before Hydra writes there: the running run's config stays its own and
        # its log has no word of the refused one.
        kept = {p: p.read_bytes() for p in (out / ".hydra").iterdir()}
        second = subprocess.run([sys.executable, "-m", "olmocr.train", *FAST, "trainer.max_duration.value=600",
                                 f"hydra.run.dir={out}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and second.stderr.splitlines() == [f"error: {refused.value}"], second.stderr
        assert {p: p.read_bytes() for p in kept} == kept
        assert "in use" not in (out / "train.log").read_text()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # Killed outright, it holds nothing: the next run resumes from its newest checkpoint, for one step.
    newest = max(int(p.name.split("_")[1]) for p in (out / "checkpoints").glob("step_*") if "." not in p.name)
    result, _ = train(tmp_path, ["trainer.max_duration.value=500", "checkpoint.interval=2",
                                 f"trainer.hard_stop.value={newest + 1}"], "run")
    assert result["state"]["step"] == newest + 1 and max(losses(out)) == newest + 1
