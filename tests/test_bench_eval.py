"""Held-out bench scores inside training: the pages chosen, the figures equal to olmocr.bench on the saved
outputs and to pipeline.bench + olmocr.bench on the saved weights, the best checkpoint kept and released.
(Exact resume with bench evals: tests/test_train.py; two processes: the gloo test there; GRPO: test_grpo.py.)"""

import glob
import json
import os
import shutil

import pytest

from conftest import SAMPLE, write_pdf
from olmocr.config import compose


def bench_folder(root, categories: dict[str, int]) -> str:
    """A bench folder with ``n`` one-page PDFs per category (test file), one present test each."""
    os.makedirs(os.path.join(root, "pdfs"), exist_ok=True)
    for category, n in categories.items():
        with open(os.path.join(root, f"{category}.jsonl"), "w") as fh:
            for i in range(n):
                write_pdf(os.path.join(root, "pdfs", f"{category}_{i}.pdf"), [f"Page {i} of {category}"])
                fh.write(json.dumps({"pdf": f"{category}_{i}.pdf", "page": 1, "id": f"{category}_{i}", "type": "present",
                                     "text": f"Page {i}"}) + "\n")
    return str(root)


PLOTS = "{_target_:olmocr.train.callbacks.Plots}"


def check_plots(out: str, rows: list[dict]) -> None:
    """The SFT run's curves: loss with the eval losses, lr; the held-out bench eval's overall, per category and
    pages parsed; per test type; output length. What each PNG draws is the run's metrics."""
    from test_reports import expected, figure_series

    plots = os.path.join(out, "plots")
    assert {"loss.png", "lr.png", "grad_norm.png", "tokens_per_s.png"} <= set(os.listdir(plots))
    assert not os.path.exists(os.path.join(plots, "rewards.png"))  # no GRPO panels for SFT
    loss = figure_series(os.path.join(plots, "loss.png"))
    assert loss["train/loss"] == expected(rows, "train", "train/loss") and len(loss["train/loss"][0]) == 4
    assert loss["eval/synth/loss"] == expected(rows, "eval", "eval/synth/loss")
    assert figure_series(os.path.join(plots, "lr.png"))["train/lr"] == expected(rows, "train", "train/lr")
    held_out = figure_series(os.path.join(plots, "bench_eval.png"))
    assert {"eval/bench/overall", "eval/bench/category/synth", "eval/bench/parsed"} <= set(held_out)
    assert all(held_out[k] == expected(rows, "eval", k) and held_out[k][0] == [2, 4] for k in held_out)
    types = figure_series(os.path.join(plots, "bench.png"))
    assert {"eval/bench/type/present", "eval/bench/type/absent"} <= set(types)
    assert all(types[k] == expected(rows, "eval", k) for k in types)
    length = figure_series(os.path.join(plots, "completion_length.png"))
    assert length["eval/bench/output_tokens"] == expected(rows, "eval", "eval/bench/output_tokens")


def score(candidates, out) -> dict:
    from olmocr.bench.__main__ import run

    os.makedirs(out)
    return run(compose("bench", [f"bench_dir={SAMPLE}/eval", f"candidates={candidates}", "html=false"]), str(out))


def bench_eval(root, tmp_path, **kwargs):
    from olmocr.config import build

    cfg = compose("train", [f"eval.bench.root={root}", *(f"eval.bench.{k}={v}" for k, v in kwargs.items())])
    return build(cfg.eval.bench, output_dir=str(tmp_path)).load()


def test_a_fixed_sample_spread_over_every_category_and_errors_in_one_line(tmp_path):
    from olmocr.train.checkpoint import Checkpointing

    root = bench_folder(tmp_path / "bench", {"tables": 6, "math": 1, "scans": 3})
    chosen = bench_eval(root, tmp_path, count=4, seed=3)
    assert len(chosen.pages) == 4 and {pdf.split("_")[0] for pdf, _ in chosen.pages} == {"tables", "math", "scans"}
    assert bench_eval(root, tmp_path, count=4, seed=3).pages == chosen.pages  # fixed
    assert {(t.pdf, t.page) for _, t in chosen.bench.tests} == set(chosen.pages)  # only the sampled pages are scored
    assert len(bench_eval(root, tmp_path, count="null").pages) == 10
    assert "eval/bench/category/math" in chosen.metric_names() and "eval/bench/type/present" in chosen.metric_names()
    with pytest.raises(ValueError, match=r"^eval.bench.root: .*nowhere is not a folder"):
        bench_eval(tmp_path / "nowhere", tmp_path)
    with pytest.raises(ValueError, match="eval.bench.count: must be at least 1"):
        bench_eval(root, tmp_path, count=0)
    with pytest.raises(ValueError, match="the bench eval logs no eval/bench/category/tabels; it logs .*category/tables"):
        Checkpointing(keep_best="eval/bench/category/tabels").check(10, chosen)
    with pytest.raises(ValueError, match="this run has no bench eval"):
        Checkpointing(keep_best="eval/bench/overall").check(10, None)
    with pytest.raises(ValueError, match="needs evals: set trainer.eval_interval"):
        Checkpointing(keep_best="eval/bench/overall").check(None, chosen)


def test_the_report_shows_the_first_eval_to_reach_the_best_score(tmp_path, caplog):
    """As keep_best keeps it: a later eval that only ties is not the best."""
    root = bench_folder(tmp_path / "bench", {"tables": 2})
    evaluator = bench_eval(root, tmp_path)
    answers = {2: ["Page 0", "nothing"], 4: ["Page 0", "Page 1"], 6: ["Page 0", "Page 1"]}
    overall = {}
    for step, texts in answers.items():
        results = [{"pdf": pdf, "page": page, "text": text, "parsed": True, "outcome": "ok", "output_tokens": 3}
                   for (pdf, page), text in zip(evaluator.pages, texts)]
        overall[step] = evaluator.write_and_score(step, results, 1.0)["eval/bench/overall"]
    assert overall[2] < overall[4] == overall[6] == 1.0
    with caplog.at_level("INFO", logger="olmocr.train"):
        path = evaluator.write_report()
    assert "report of step 4 (overall 100.0%)" in caplog.text and os.path.getsize(path) > 1000


def test_an_unparsed_answer_is_the_models_own_without_the_fallback_and_a_text_layer_with_it(tmp_path):
    """eval/bench/answered: with fallback off the candidate is what the model wrote (answered when it has
    text); with it on, an unparsed answer's candidate is the text layer (not answered)."""
    root = bench_folder(tmp_path / "bench", {"tables": 2})
    for fallback, answered in (("false", 0.5), ("true", 0.0)):
        evaluator = bench_eval(root, tmp_path / fallback, fallback=fallback)
        results = [{"pdf": pdf, "page": page, "text": text, "parsed": False, "outcome": "no front matter",
                    "output_tokens": 3} for (pdf, page), text in zip(evaluator.pages, ["Page 0", ""])]
        metrics = evaluator.write_and_score(2, results, 1.0)
        assert metrics["eval/bench/answered"] == answered, fallback
        assert "eval/bench/cer" not in metrics  # no .md beside these PDFs: no truth, no error rate


def test_pages_that_cannot_be_read_at_an_eval_are_scored_listed_and_said(tmp_path, caplog):
    """A storage brownout mid-run (or a PDF damaged since the start): the eval goes on, the page counts as its
    text layer, pages.jsonl says why, and one warning names how many."""
    from olmocr.formats.frontmatter import PageMeta, write_document
    from olmocr.train.bench_eval import Answer

    root = bench_folder(tmp_path / "bench", {"tables": 3})
    evaluator = bench_eval(root, tmp_path)
    os.remove(os.path.join(root, "pdfs", "tables_1.pdf"))
    with open(os.path.join(root, "pdfs", "tables_2.pdf"), "w") as fh:
        fh.write("truncated")
    answer = Answer(write_document(PageMeta(), "Page 0"), "stop", 3)
    results = evaluator.decode(lambda samples: [answer for _ in samples], evaluator.pages, 1)
    with caplog.at_level("INFO", logger="olmocr.train"):
        metrics = evaluator.write_and_score(7, results, 1.0)
    assert metrics["eval/bench/type/present"] == 1 / 3  # the page that was read
    pages = {p["pdf"]: p for p in map(json.loads, open(tmp_path / "bench_eval" / "step_000007" / "pages.jsonl"))}
    assert pages["tables_0.pdf"]["outcome"] == "ok"
    assert pages["tables_1.pdf"]["outcome"].startswith("not rendered: missing_pdf")
    assert pages["tables_2.pdf"]["outcome"].startswith("not rendered: unreadable_pdf")
    assert "bench eval at step 7: 2 of 3 pages could not be rendered" in caplog.text


def test_decoding_does_not_trace_a_model_compiled_for_training(tmp_path, tiny):
    """trainer.compile compiles the blocks for training steps; generate's no-grad, cached calls
    would compile it again shape after shape, past dynamo's recompile limit. The eval decodes eagerly."""
    import torch
    from torch._dynamo.utils import counters

    from olmocr.models.loader import compile_blocks

    processor, model = tiny.load_processor(), tiny.load_model()
    compile_blocks(model)
    evaluator = bench_eval(f"{SAMPLE}/eval", tmp_path, max_new_tokens=4)
    counters.clear()
    results = evaluator.decode(evaluator.decoder(model, processor, torch.device("cpu")), evaluator.pages[:2], 1)
    assert [r["output_tokens"] for r in results] == [4, 4] and not counters["stats"]


@pytest.mark.integration
def test_sft_bench_evals_equal_the_bench_and_the_pipeline_and_the_best_checkpoint_is_kept_and_released(tmp_path,
                                                                                                         cache_dir):
    from olmocr.prepare import run as prepare
    from test_train import train

    # A small lr keeps the weights near their random start, where what the model writes depends on the page
    # (trained further, the tiny model writes one string whatever the page): the equality below needs that.
    result, out = train(tmp_path, ["trainer.max_duration.value=4", "trainer.eval_interval=2", "checkpoint.interval=1",
                                   "checkpoint.keep_last=1", "checkpoint.keep_best=eval/bench/overall", "optimizer.lr=1e-5",
                                   "eval.bench.fallback=true", f"callbacks.plots={PLOTS}"])
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    check_plots(out, rows)
    evals = {r["step"]: r for r in rows if r["kind"] == "eval"}
    assert sorted(evals) == [2, 4]
    tests = sum(1 for _ in open(f"{SAMPLE}/eval/synth.jsonl"))
    for step, row in evals.items():
        assert {"eval/bench/overall", "eval/bench/overall_score", "eval/bench/category/synth", "eval/bench/parsed",
                "eval/bench/output_tokens", "eval/bench/type/present", "eval/bench/type/absent"} <= set(row)
        # The saved outputs, scored by olmocr.bench: the same figures.
        candidates = os.path.join(out, "bench_eval", f"step_{step:06d}", "candidates")
        summary = score(candidates, tmp_path / f"score_{step}")
        assert summary["tests"] == tests and summary["missing_pages"] == []
        assert row["eval/bench/overall"] == summary["overall"]
        assert all(row[f"eval/bench/type/{t}"] == v["pass_rate"] for t, v in summary["types"].items())
    # Steps 1-4 saved, keep_last=1: the newest, and the best (the first eval: the later one is no better).
    best = json.load(open(os.path.join(out, "checkpoints", "step_000004", "best.json")))
    assert best["step"] == 2 and best["value"] == evals[2]["eval/bench/overall"]
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == ["step_000002", "step_000004"]
    assert json.load(open(os.path.join(out, "run_info.json")))["summary"]["best"] == best
    assert os.path.getsize(os.path.join(out, "bench_eval", "report.html")) > 1000
    os.makedirs(tmp_path / "prepare")
    record = prepare(compose("prepare", [f"sources=[{out}]", f"output={tmp_path}/best", "step=best"]),
                     str(tmp_path / "prepare"))
    assert record["sources"][0]["step"] == 2
    with pytest.raises(ValueError, match="step: expected a step number, best or null"):
        prepare(compose("prepare", [f"sources=[{out}]", f"output={tmp_path}/x", "step=worst"]), str(tmp_path / "p2"))

    # The pipeline's page conversion (its steps, requests and client; transformers serve) on the step-4 weights at
    # temperature 0, the pages rendered as the eval rendered them: the model's answers are the eval's. Then
    # pipeline.bench through that server, each page twice: the eval's outputs, and so its figures.
    from olmocr.config import build
    from olmocr.pipeline.bench import run as pipeline_bench

    args = ["model=olmocr2_7b", "model.dtype=float32", "model.image_min_pixels=3136", "model.image_max_pixels=65536",
            f"model.name_or_path={out}/checkpoints/step_000004/model", f"bench_dir={SAMPLE}/eval",
            "convert.temperatures=[0]", "convert.max_tokens=48", "convert.steps.render.longest_side=256"]
    cfg = compose("pipeline_bench", args)
    converter = build(cfg.convert, server=build(cfg.server, model=build(cfg.model)), log_dir=str(tmp_path / "server"))
    pages = [json.loads(line) for line in open(os.path.join(out, "bench_eval", "step_000004", "pages.jsonl"))]
    assert len(pages) == 8 and all(not p["parsed"] and p["answer"] for p in pages)  # the tiny model: text layers
    assert len({p["answer"] for p in pages}) > 1
    candidates = tmp_path / "candidates"
    with converter:
        for page in pages:
            sample = {"pdf_path": f"{SAMPLE}/eval/pdfs/{page['pdf']}", "page": page["page"]}
            _, [reply] = converter.run(converter.sample(sample, 1, 0.0))
            # Same tokens; transformers serve's Qwen response parser drops the whitespace that ends an answer.
            assert (reply.text, reply.output_tokens) == (page["answer"].rstrip(), page["output_tokens"])
        served = ["server=external", f"server.url={converter.server.url}", f"server.model_name={converter.server.model}"]
        os.makedirs(tmp_path / "convert")
        pipeline_bench(compose("pipeline_bench", [*args, *served, f"candidates={candidates}", "repeats=2",
                                                  "progress=false"]), str(tmp_path / "convert"))
    pdfs = sorted(os.path.basename(p)[:-4] for p in glob.glob(f"{SAMPLE}/eval/pdfs/*.pdf"))
    assert sorted(os.listdir(candidates)) == sorted(["answers.jsonl"] + [f"{p}_pg1_repeat{r}.md" for p in pdfs
                                                                          for r in (1, 2)])
    ours = os.path.join(out, "bench_eval", "step_000004", "candidates")
    for name in os.listdir(ours):
        if name == "answers.jsonl":  # both say every output is a text layer, not the model's reading
            for folder in (ours, candidates):
                rows = [json.loads(line) for line in open(os.path.join(folder, name), encoding="utf-8")]
                assert len(rows) == len(pdfs) * (2 if folder == candidates else 1)
                assert not any(row["answered"] for row in rows)
            continue
        expected = open(os.path.join(ours, name), encoding="utf-8").read()
        for repeat in (1, 2):
            assert open(candidates / name.replace("_repeat1", f"_repeat{repeat}"), encoding="utf-8").read() == expected
    summary = score(candidates, tmp_path / "score_pipeline")
    assert summary["overall"] == evals[4]["eval/bench/overall"]
    assert summary["scoring"] == "strict" and summary["makeup"]["answered"] == 0 == evals[4]["eval/bench/answered"]
    assert summary["makeup"]["fallback"] == len(pdfs) and summary["makeup"]["cer"] == evals[4]["eval/bench/cer"]
    shutil.rmtree(tmp_path / "best")


def test_a_model_that_writes_blocks_is_scored_for_layout_beside_its_text(tmp_path):
    """With a blocks prompt, each answer's blocks are kept beside its candidate and the eval's figures add layout
    (F1, mean IoU, label and order accuracy) over the pages whose truth has blocks; an answer whose blocks do not
    parse finds none."""
    from olmocr.formats.frontmatter import parse_document, write_document
    from olmocr.formats.structure import blocks_from_record, format_blocks
    from olmocr.synth.generator import generate
    from olmocr.train.bench_eval import Answer

    root = tmp_path / "bench"
    generate(str(root), 4, seed=9, reading="structured", category="structured")
    evaluator = bench_eval(root, tmp_path / "eval", count=4, **{"steps.prompt.version": "blocks"})
    results = []
    for n, (pdf, page) in enumerate(evaluator.pages):
        stem = os.path.join(root, "pdfs", pdf[:-4])
        meta, _ = parse_document(open(stem + ".md").read())
        blocks = blocks_from_record(json.load(open(stem + ".blocks.json")))
        answer = write_document(meta, format_blocks(blocks) if n < 3 else "# a plain answer")
        results.append(evaluator.judge(pdf, page, Answer(answer, "stop", 40)))
    assert [r["parsed"] for r in results] == [True, True, True, False]
    metrics = evaluator.write_and_score(2, results, 1.0)
    assert metrics["eval/bench/layout/mean_iou"] == pytest.approx(
        sum(len(r["blocks"]) for r in results[:3]) / sum(
            len(json.load(open(os.path.join(root, "pdfs", p[:-4] + ".blocks.json")))["blocks"]) for p, _ in
            evaluator.pages), abs=1e-4)
    assert metrics["eval/bench/layout/order_accuracy"] < 1 and metrics["eval/bench/overall"] < 1
    written = json.load(open(tmp_path / "eval" / "bench_eval" / "step_000002" / "results.json"))
    assert written["layout"]["pages"] == 4 and written["layout"]["pages_without_blocks"] == 1
