"""GRPO on the tiny model, on CPU: real generations scored by the rewards, real updates, resume. (A sweep over
seeds, souped: tests/test_factory.py.)"""

import glob
import json
import os

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from conftest import COMPILE, SAMPLE, compiling, write_pdf
from olmocr.config import build, compose

SEEN: list[dict] = []


def recording(completions, completion_ids=None, tests=None, reference=None, page_id=None, **_):
    """A reward that keeps what trl hands to rewards, to check it (and scores completion length)."""
    SEEN.append({"completions": list(completions), "completion_ids": [list(i) for i in completion_ids],
                 "tests": list(tests), "reference": list(reference), "page_id": list(page_id)})
    return [len(ids) / 48 for ids in completion_ids]


NO_EVALS = ["trainer.eval_interval=null", "checkpoint.keep_best=null"]
EVALS = ["trainer.eval_interval=2", "checkpoint.keep_best=eval/bench/overall"]


def grpo(tmp_path, overrides, name="run"):
    from olmocr.train.__main__ import run

    out = str(tmp_path / name)
    # Bench evals and plots where they are the point (they are grpo_tiny's own: trainer.eval_interval=2).
    cfg = compose("train", ["+experiment=grpo_tiny", "callbacks.plots=null", *NO_EVALS] + overrides)
    return run(cfg, out), out


def metrics(out):
    return {r["step"]: r for r in map(json.loads, open(os.path.join(out, "metrics.jsonl"))) if r["kind"] == "train"}


def weights(checkpoint):
    return load_file(os.path.join(checkpoint, "model.safetensors"))


def loaded(tiny, checkpoint=None):
    return tiny.load_model(path=checkpoint).state_dict()


def test_rewards_see_real_generations_and_parameters_change(tmp_path, cache_dir, tiny):
    SEEN.clear()
    result, out = grpo(tmp_path, ["rewards=all", "+rewards.recording={_target_: test_grpo.recording, weight: 0.1}",
                                  "trainer.max_duration.value=3", "checkpoint.interval=3"])
    assert result["state"]["step"] == 3 and result["checkpoint"].endswith("checkpoint-3")
    # One call per step; each sees the group of 4 completions of one bench page, decoded from real ids.
    processor = tiny.load_processor()
    assert len(SEEN) == 3
    for call in SEEN:
        assert len(call["completions"]) == 4 and len(set(call["page_id"])) == 1
        for completion, ids in zip(call["completions"], call["completion_ids"]):
            assert 0 < len(ids) <= 48
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            assert text == processor.tokenizer.decode(ids, skip_special_tokens=True)
        page = call["page_id"][0].split("#")[0]
        assert all(json.loads(t)[0]["pdf"] == page for t in call["tests"])
        truth = open(os.path.join(SAMPLE, "train", "pdfs", page[:-4] + ".md"), encoding="utf-8").read()
        assert call["reference"] == [truth] * 4
    # Every reward is logged each step, with the bench's per-type pass rates.
    rows = metrics(out)
    assert sorted(rows) == [1, 2, 3]
    for name in ("bench", "front_matter", "eos", "medoid", "edit_distance", "element_count",
                 "rectangular_tables", "recording"):
        assert all(f"train/rewards/{name}/mean" in row for row in rows.values()), name
    assert any(key.startswith("train/bench/") for key in rows[1])
    # The signal GRPO learns from: how far each page's completions are apart, and how many pages have none.
    for row in rows.values():
        assert row["train/signal/group_std"] >= 0 and 0 <= row["train/signal/alike_groups"] <= 1
    assert any(row["train/signal/group_std"] > 0 for row in rows.values())
    # The medoid and edit-distance rewards vary within a group, so the policy gets a gradient and moves.
    assert any(row["train/reward_std"] > 0 for row in rows.values())
    before, after = loaded(tiny), loaded(tiny, result["checkpoint"])
    changed = [name for name, value in after.items() if not torch.equal(value, before[name])]
    assert len(changed) > len(after) // 2
    # The checkpoint is a self-contained Hugging Face model directory (weights, config, processor).
    from olmocr.train.checkpoint import model_dir

    assert model_dir(result["checkpoint"]) == result["checkpoint"]
    from transformers import AutoProcessor

    reloaded = AutoProcessor.from_pretrained(result["checkpoint"])
    assert reloaded.tokenizer.get_vocab() == processor.tokenizer.get_vocab()


def test_the_control_sees_every_reward_of_its_batch_on_another_completion():
    """algo.shuffle_rewards: one permutation of the batch for every reward function, so each completion gets
    another completion's whole score; what a reward logs itself is the completions' own."""
    from olmocr.train.grpo_signal import as_seen_by_grpo

    logged: dict[str, list[float]] = {}

    def log_metric(name, value):
        logged.setdefault(name, []).append(value)

    def length(completions, **_):
        return [float(len(c)) for c in completions]

    def parity(completions, log_metric=None, **_):
        log_metric("parity/true", sum(len(c) % 2 for c in completions) / len(completions))
        return [float(len(c) % 2) for c in completions]

    completions = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff", "g" * 7, "h" * 8]
    pages = ["p1"] * 4 + ["p2"] * 4
    plain = as_seen_by_grpo([length, parity], [1.0, 0.5])
    assert plain[0](completions, page_id=pages, log_metric=log_metric) == [1.0, 2, 3, 4, 5, 6, 7, 8]
    plain[1](completions, page_id=pages, log_metric=log_metric)
    totals = [n + 0.5 * (n % 2) for n in range(1, 9)]
    assert logged["signal/group_std"] == [pytest.approx((np.std(totals[:4]) + np.std(totals[4:])) / 2)]
    assert logged["signal/alike_groups"] == [0.0]
    control = as_seen_by_grpo([length, parity], [1.0, 0.5], shuffle_seed=0)
    orders = set()
    for _ in range(3):  # a new permutation every batch
        seen_length = control[0](completions, page_id=pages, log_metric=log_metric)
        seen_parity = control[1](completions, page_id=pages, log_metric=log_metric)
        assert sorted(seen_length) == [1.0, 2, 3, 4, 5, 6, 7, 8] and seen_length != [1.0, 2, 3, 4, 5, 6, 7, 8]
        assert seen_parity == [n % 2 for n in seen_length]  # the same permutation for both
        orders.add(tuple(seen_length))
    assert len(orders) == 3 and logged["parity/true"] == [0.5] * 4
    alike = as_seen_by_grpo([lambda completions, **_: [1.0] * len(completions)], [1.0])
    alike[0](completions, page_id=pages, log_metric=log_metric)
    assert logged["signal/alike_groups"][-1] == 1.0 and logged["signal/group_std"][-1] == 0.0


@pytest.mark.integration
def test_resume_continues_from_the_newest_checkpoint(tmp_path, cache_dir, caplog):
    overrides = ["trainer.max_duration.value=4", "checkpoint.interval=2", "rewards=all", *EVALS]  # evals: RNG kept
    full, full_out = grpo(tmp_path, overrides, "full")
    first, out = grpo(tmp_path, overrides + ["trainer.hard_stop.value=2"], "split")
    assert first["state"]["step"] == 2
    caplog.set_level("INFO", logger="olmocr.train")
    second, _ = grpo(tmp_path, overrides, "split")
    assert second["state"]["step"] == 4
    assert f"resuming from {out}/checkpoints/checkpoint-2 with 1 value(s) changed since it was written: " \
           "trainer.hard_stop.value: 2.0 → null" in caplog.text
    rows = metrics(out)
    assert sorted(rows) == [1, 2, 3, 4]  # steps 3 and 4 come from the resumed run
    reference = metrics(full_out)
    for step in (3, 4):  # same pages, same sampling RNG, same weights: the same rewards
        assert rows[step]["train/reward"] == pytest.approx(reference[step]["train/reward"], abs=1e-6)
    a, b = weights(full["checkpoint"]), weights(second["checkpoint"])
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.integration
def test_each_eval_scores_the_held_out_bench_and_reports_eval_benches_rewards(tmp_path, cache_dir):
    result, out = grpo(tmp_path, [*EVALS, "trainer.max_duration.value=2", "checkpoint.interval=null",
                                  f"+data.eval.synth.root={SAMPLE}/eval", "+data.eval.synth.types=[present,absent]",
                                  "callbacks.plots={_target_:olmocr.train.callbacks.Plots}"])
    evals = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    evals = [r for r in evals if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [2, 2]  # the bench eval, then trl's eval of the rewards
    bench, rewards = evals
    assert {"eval/bench/overall", "eval/bench/category/synth", "eval/bench/type/present", "eval/bench/parsed"} <= set(bench)
    candidates = glob.glob(os.path.join(out, "bench_eval", "step_000002", "candidates", "*_pg1_repeat1.md"))
    assert len(candidates) == 8
    assert {"eval/reward", "eval/rewards/bench/mean", "eval/rewards/eos/mean"} <= set(rewards)
    assert set(k for k in rewards if k.startswith("eval/bench/")) == {"eval/bench/present", "eval/bench/absent"}
    # The eval's step is saved as the best (keep_best), though saves were off; the record is in the checkpoint.
    best = json.load(open(os.path.join(out, "checkpoints", "checkpoint-2", "best.json")))
    assert best == {"metric": "eval/bench/overall", "step": 2, "value": bench["eval/bench/overall"]}
    check_plots(out)


def check_plots(rl: str) -> None:
    """The GRPO run's curves: every reward's mean, the rollouts' and the held-out eval's pass rates per test type,
    KL, completion length; drawn again on demand."""
    import subprocess
    import sys

    from test_reports import expected, figure_series

    rows = [json.loads(line) for line in open(os.path.join(rl, "metrics.jsonl"))]
    rewards = figure_series(os.path.join(rl, "plots", "rewards.png"))
    assert {k for k in rewards if k.startswith("train/rewards/")} == \
        {k for k in rows[0] if k.startswith("train/rewards/") and k.endswith("/mean")}
    assert all(rewards[k] == expected(rows, "train", k) for k in rewards)
    bench = figure_series(os.path.join(rl, "plots", "bench.png"))
    assert {"eval/bench/type/present", "eval/bench/present"} <= set(bench)  # held-out eval's; the reward eval's
    assert any(k.startswith("train/bench/") for k in bench)  # the rollouts'
    assert all(bench[k] == expected(rows, "eval" if k.startswith("eval/") else "train", k) for k in bench)
    for panel, key in (("kl", "train/kl"), ("completion_length", "train/completions/mean_length")):
        assert figure_series(os.path.join(rl, "plots", f"{panel}.png"))[key] == expected(rows, "train", key)
    os.remove(os.path.join(rl, "plots", "kl.png"))
    proc = subprocess.run([sys.executable, "-m", "olmocr.report.plots", f"run_dir={rl}"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert os.path.join(rl, "plots", "kl.png") in proc.stdout.splitlines()


@pytest.mark.integration
def test_compiled_blocks_train_while_generation_runs_eagerly(tmp_path, cache_dir):
    """trainer.compile compiles the blocks, as in SFT: trl's whole-model compile recompiled the vision tower at
    every window count (117 recompiles in two steps of the tiny model). Generation runs eagerly: through the
    compiled decoder layers, the cached decode compiled them again for each layer's cache, past dynamo's limit
    on a large model before the first training step (here: past the limit below, which the training graphs
    fit with room for a no-grad pass)."""
    with compiling(recompile_limit=3) as compiled:
        result, _ = grpo(tmp_path, [*COMPILE, "trainer.max_duration.value=2", "checkpoint.interval=null"])
    assert compiled and result["state"]["step"] == 2


def test_config_errors_come_before_any_work(tmp_path):
    from olmocr.train.__main__ import run

    def error(overrides):
        with pytest.raises(ValueError) as info:
            run(compose("train", overrides), str(tmp_path / "x"))
        return str(info.value)

    assert "needs rewards" in error(["algo=grpo", "data=synth_bench"])
    assert "algo.num_generations=3 must divide the completions per step" in error(["+experiment=grpo_tiny", "algo.num_generations=3"])
    assert "trl_args: no_such_option" in error(["+experiment=grpo_tiny", "+algo.trl_args.no_such_option=1"])
    assert "algo.generation" in error(["+experiment=grpo_tiny", "algo.generation=sglang"])
    assert "GRPO counts steps or epochs" in error(["+experiment=grpo_tiny", "trainer.max_duration.unit=tokens"])
    if not torch.cuda.is_available():  # before the model loads or the server is waited for: at once
        assert "over NCCL, which needs CUDA GPUs" in error(["+experiment=grpo_tiny", "algo.generation=vllm_server",
                                                            "algo.vllm.server_timeout=600"])
    with pytest.raises(ValueError, match=r"data\.train\.synth\.roots: .*algo=grpo takes bench data"):
        compose("train", ["algo=grpo", "rewards=olmocr2"])  # SFT sources are not benches


def test_vllm_server_layout_command_and_unreachable_server(tmp_path):
    from olmocr.train.vllm_server import vllm_server_command, wait_for_server

    cmd = vllm_server_command("/ckpt/model", "10.0.0.5", 8001, tensor_parallel_size=2, data_parallel_size=3,
                              gpu_memory_utilization=0.5, max_model_length=16384)
    assert cmd == ["trl", "vllm-serve", "--model", "/ckpt/model", "--host", "10.0.0.5", "--port", "8001",
                   "--tensor-parallel-size", "2", "--data-parallel-size", "3", "--gpu-memory-utilization", "0.5",
                   "--max-model-len", "16384"]
    with pytest.raises(ValueError, match=r"http://127.0.0.1:9/health not healthy after 0s: start it .*trl vllm-serve"):
        wait_for_server("127.0.0.1", 9, 0.0, cmd)


def test_bench_prompts_skip_broken_pages_and_filter(tmp_path, processor):

    from olmocr.config import CONF_DIR
    from olmocr.data.bench_prompts import build_prompt_dataset

    bench = tmp_path / "bench"
    (bench / "pdfs").mkdir(parents=True)
    write_pdf(str(bench / "pdfs" / "two.pdf"), ["First page text", "Second page text"])
    (bench / "pdfs" / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    tests = [{"type": "present", "pdf": "two.pdf", "page": 2, "id": "a", "text": "Second page"},
             {"type": "absent", "pdf": "two.pdf", "page": 2, "id": "b", "text": "First page"},
             {"type": "present", "pdf": "two.pdf", "page": 1, "id": "c", "text": "First"},
             {"type": "present", "pdf": "broken.pdf", "page": 1, "id": "d", "text": "x"},
             {"type": "present", "pdf": "missing.pdf", "page": 1, "id": "e", "text": "x"},
             {"type": "present", "pdf": "two.pdf", "page": 3, "id": "f", "text": "x"}]
    (bench / "t.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tests) + "{broken\n")
    steps = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF_DIR, "data", "steps", "prompt_v4.yaml")))
    steps["render"]["longest_side"] = 200
    report = tmp_path / "rejected.jsonl"
    data = build_prompt_dataset({"b": {"root": str(bench)}}, steps, str(report), processor=processor)
    assert len(data) == 2  # pages 1 and 2 of two.pdf; the rest are reported
    reasons = sorted(json.loads(line)["reason"] for line in open(report))
    assert len(reasons) == 3 and "missing_pdf" in reasons and "missing_page" in reasons
    row = data[[json.loads(r)[0]["id"] for r in data["tests"]].index("a")]
    assert [t["id"] for t in json.loads(row["tests"])] == ["a", "b"]
    assert max(row["image"].size) in (200, 201) and row["reference"] is None
    content = row["prompt"][0]["content"]
    assert [part["type"] for part in content] == ["text", "image"]  # instruction first, as inference
    only_absent = build_prompt_dataset({"b": {"root": str(bench), "types": ["absent"]}}, steps, None,
                                       processor=processor)
    assert len(only_absent) == 1
    # Pages are made when read: a PDF gone since the dataset was built (a cleaned-up shared folder) costs its
    # row, which the next page's takes, and a line in the report, not the run.
    write_pdf(str(bench / "pdfs" / "one.pdf"), ["Only page"])
    (bench / "t.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tests[:3]) + json.dumps(
        {"type": "present", "pdf": "one.pdf", "page": 1, "id": "g", "text": "Only"}) + "\n")
    report.unlink()
    data = build_prompt_dataset({"b": {"root": str(bench)}}, steps, str(report), processor=processor)
    ids = [json.loads(tests)[0]["id"] for tests in data.with_format(None)["tests"]]  # the rows unmade
    (bench / "pdfs" / "one.pdf").unlink()
    stand_in = data[ids.index("g")]
    assert json.loads(stand_in["tests"])[0]["id"] == ids[(ids.index("g") + 1) % len(ids)]
    assert json.loads(data[ids.index("g")]["tests"]) == json.loads(stand_in["tests"])  # known gone: no new try
    assert [(r["reason"], r["pdf"].rsplit("/", 1)[-1]) for r in map(json.loads, open(report))] == [
        ("missing_pdf", "one.pdf")]
    data = build_prompt_dataset({"b": {"root": str(bench)}}, steps, None, processor=processor)  # two.pdf's pages
    os.rename(bench / "pdfs" / "two.pdf", bench / "pdfs" / "moved.pdf")  # every page gone
    with pytest.raises(ValueError, match=r"^data: no row could be made of 2 items \(the reasons: the log\)$"):
        data[0]
    with pytest.raises(ValueError, match="no test file"):
        build_prompt_dataset({"b": {"root": str(bench), "files": ["nope"]}}, steps, None, processor=processor)


def test_grpo_qwen25_is_upstreams_best_recorded_run():
    """olmOCR 2's recorded best GRPO run, as trl 1.16 receives it (see the experiment file's comment)."""
    from olmocr.train.algos import grpo_arguments
    from olmocr.train.hf import training_arguments

    cfg = compose("train", ["+experiment=grpo_qwen25"])
    r = OmegaConf.to_container(cfg, resolve=True)
    strategy = build(cfg.strategy, info=None, precision=cfg.trainer.precision).trainer_arguments()
    base = training_arguments(r["trainer"], strategy, save_interval=cfg.checkpoint.interval, output_dir="/tmp/unused", max_steps=10, seed=cfg.seed,
                              use_cpu=True, evaluate=False)
    args = grpo_arguments(base, r["algo"], reward_weights=[1.0, 1.0, 1.0])
    assert (args.num_generations, args.per_device_train_batch_size, args.gradient_accumulation_steps) == (28, 1, 28)
    assert (args.temperature, args.top_p, args.beta, args.seed) == (0.8, 1.0, 0.01, 1)
    assert (args.loss_type, args.scale_rewards, args.importance_sampling_level) == ("bnpo", "group", "sequence")
    assert args.vllm_importance_sampling_correction and args.vllm_importance_sampling_mode == "sequence_mask"
    assert args.vllm_importance_sampling_clip_max == 3.0 and args.dataloader_drop_last
    assert (args.vllm_mode, args.vllm_max_model_length, args.max_completion_length) == ("server", 16384, 8000)
    assert args.deepspeed["zero_optimization"] == {"stage": 2} and args.bf16 and (args.save_steps, r["checkpoint"]["keep_last"]) == (25, 30)
    assert not args.cast_lm_head_to_fp32
    assert (r["optimizer"]["lr"], r["scheduler"]["_target_"], r["scheduler"]["warmup"]) == (
        2e-6, "olmocr.train.schedules.linear", 100)
    assert set(r["rewards"]) == {"bench", "front_matter", "eos"}


@pytest.mark.integration
@pytest.mark.vllm
def test_colocated_vllm_generates_from_the_weights_each_step_updated(tmp_path, cache_dir, tiny, warm_python):
    """GRPO with vLLM inside the trainer (the CPU build here): two steps, then the bench eval decodes with that
    engine after its weight sync. Its answers are the trained weights' own greedy answers (transformers on
    the saved step), not the initial weights': the updates reach the engine."""
    import subprocess

    from olmocr.config import PROJECT_ROOT, build

    # A process of its own: this one may have imported trl's GRPO trainer for transformers generation already.
    out = str(tmp_path / "run")
    proc = subprocess.run([warm_python, "-m", "olmocr.train", "+experiment=grpo_tiny", "callbacks.plots=null",
                           "algo.generation=vllm_colocate", "eval.bench.engine=vllm", "optimizer.lr=3e-2",
                           "trainer.max_duration.value=2", "checkpoint.interval=2", "trainer.eval_interval=2",
                           "checkpoint.keep_best=null", f"hydra.run.dir={out}"], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]  # vLLM's engine ends before the run's process group
    rows = metrics(out)
    assert sorted(rows) == [1, 2] and all(r["train/completions/mean_length"] > 0 for r in rows.values())
    checkpoint = os.path.join(out, "checkpoints", "checkpoint-2")

    def answers(run: str) -> dict[str, str]:
        folder = os.path.join(run, "bench_eval", "step_000002", "candidates")
        return {name: open(os.path.join(folder, name), encoding="utf-8").read() for name in os.listdir(folder)
                if name.endswith(".md")}  # answers.jsonl beside them says which the model wrote

    engine = answers(out)
    assert len(engine) == 8 and all(engine.values())
    cfg = compose("train", ["+experiment=grpo_tiny", "eval.bench.engine=transformers"])

    def greedy(model_dir: str | None, name: str) -> dict[str, str]:
        bench = build(cfg.eval.bench, output_dir=str(tmp_path / name)).load()
        decoder = bench.decoder(tiny.load_model(path=model_dir), tiny.load_processor(), torch.device("cpu"))
        bench.evaluate(decoder, step=2)
        return answers(str(tmp_path / name))

    assert greedy(checkpoint, "trained") == engine
    initial = greedy(None, "initial")
    assert sum(initial[name] != engine[name] for name in engine) >= 4
