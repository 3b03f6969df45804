"""Held-out olmOCR-bench scores inside training (``eval.bench``, conf/eval/).

Every ``trainer.eval_interval`` steps the current weights greedy-decode the pages of a bench folder: a
fixed sample of ``count`` pages spread evenly over its categories (test files), rendered and prompted by
the inference steps. Each answer is judged by the rule the pipeline judges an attempt by
(:func:`olmocr.formats.frontmatter.read_answer`); a page whose answer is cut off or has no front matter
that parses gets its text layer, as the pipeline's fallback gives it. So the figures are those of
``python -m olmocr.pipeline.bench convert.temperatures=[0]`` + ``python -m olmocr.bench`` on the same
weights and pages, and ``eval/bench/parsed`` says how many pages the model read itself. Scoring is ``strict`` (an output shorter than
a test's text passes none of it: :mod:`olmocr.bench.checks`); ``eval/bench/answered`` is the share of pages the
model answered with text, and ``eval/bench/cer`` the character error rate where the bench has the pages' truth.

Each eval writes ``<run>/bench_eval/step_N/``: the outputs as bench candidates (``candidates/``), what
happened to every page (``pages.jsonl``: parsed or why not, output tokens, and what the model wrote
where the text layer took its place) and the bench's ``results.json`` and ``report.md``. Under data
parallelism every rank decodes a share of the pages; rank 0 gathers, writes and scores them, and every
rank gets the figures (a save decided on them is a collective). The training RNG streams are left as
they were, so a resumed run trains exactly as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import copy
import glob
import json
import logging
import os
import random
import shutil
import time
from dataclasses import dataclass
from typing import Annotated

from olmocr.config import OneOf, Range, runtime
from olmocr.errors import UserError

log = logging.getLogger("olmocr.train")

ENGINES = ("auto", "transformers", "vllm")
STEP_DIR = "step_{:06d}"
UNRENDERED = "not rendered: "  # the outcome of a page whose PDF could not be read at eval time


@dataclass
class Answer:
    text: str
    finish_reason: str | None  # stop, length
    tokens: int  # generated, end-of-sequence token included


@contextlib.contextmanager
def preserved_rng():
    """Python's, NumPy's and torch's RNG states (CUDA's included) as they were before the block."""
    from olmocr.train.checkpoint import rng_state, set_rng_state

    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def eos_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set() if ids is None else {ids} if isinstance(ids, int) else set(ids)
    return ids | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())


class TransformersDecoder:
    """Batched greedy ``generate`` with the model's own generation config (its penalties too, as a server
    would apply them), left-padded. ``synced``: every rank runs the same number of forward passes (FSDP's
    sharded weights are gathered by all ranks together)."""

    def __init__(self, model, processor, max_new_tokens: int, device, autocast_dtype=None, synced: bool = False):
        self.model = getattr(model, "module", model)  # DDP and DeepSpeed wrap the model; FSDP2 does not
        self.processor, self.device, self.autocast_dtype, self.synced = processor, device, autocast_dtype, synced
        config = copy.deepcopy(self.model.generation_config)
        config.do_sample, config.max_new_tokens = False, max_new_tokens
        config.temperature = config.top_p = config.top_k = None  # greedy: sampling settings do not apply
        config.pad_token_id = processor.tokenizer.pad_token_id
        self.config = config
        self.eos = eos_ids(self.model, processor.tokenizer)

    def __call__(self, samples: list[dict]) -> list[Answer]:
        import torch

        texts = [self.processor.apply_chat_template(s["messages"], tokenize=False, add_generation_prompt=True)
                 for s in samples]
        inputs = self.processor(text=texts, images=[s["image"] for s in samples], padding=True, padding_side="left",
                                return_tensors="pt").to(self.device)
        autocast = torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None)
        # Eagerly (also under trl's trainers): a compiled model would recompile for every shape of a no-grad,
        # cached, token-at-a-time decode until dynamo's recompile limit, and then run eagerly anyway.
        with torch.no_grad(), autocast, torch.compiler.set_stance("force_eager"):
            out = self.model.generate(**inputs, generation_config=self.config, synced_gpus=self.synced)
        answers = []
        for row in out[:, inputs["input_ids"].shape[1]:].tolist():
            end = next((i for i, token in enumerate(row) if token in self.eos), None)
            kept = row if end is None else row[:end]
            answers.append(Answer(self.processor.tokenizer.decode(kept, skip_special_tokens=True),
                                  "length" if end is None else "stop", len(row) if end is None else end + 1))
        return answers


class VllmDecoder:
    """Greedy decoding by the vLLM engine GRPO runs colocated, after pushing it the current weights (trl's
    own weight sync, which then skips its next one)."""

    def __init__(self, trainer, processor, max_new_tokens: int):
        self.trainer, self.processor, self.max_new_tokens = trainer, processor, max_new_tokens
        self.vllm = trainer.vllm_generation

    def __call__(self, samples: list[dict]) -> list[Answer]:
        llm = self.vllm.llm
        if self.vllm.enable_sleep_mode:
            llm.wake_up(tags=["kv_cache"])
        # The model's own defaults (penalties from its generation_config.json), as a vLLM server applies them.
        params = llm.get_default_sampling_params()
        params.temperature, params.max_tokens = 0.0, self.max_new_tokens
        prompts = [{"prompt": self.processor.apply_chat_template(s["messages"], tokenize=False,
                                                                 add_generation_prompt=True),
                    "multi_modal_data": {"image": s["image"]}} for s in samples]
        outputs = llm.generate(prompts, sampling_params=params, use_tqdm=False)
        if self.vllm.enable_sleep_mode:
            llm.sleep(level=2)
            self.vllm._llm_weights_sleeping = True
        return [Answer(o.outputs[0].text, o.outputs[0].finish_reason, len(o.outputs[0].token_ids)) for o in outputs]

    def sync(self) -> None:
        """Every rank pushes its weights (a collective under ZeRO-3)."""
        self.vllm.sync_weights()
        self.trainer._last_loaded_step = self.trainer.state.global_step

    @property
    def group(self) -> int:
        """Ranks that decode together (a tensor-parallel group submits the same prompts)."""
        return self.vllm.tensor_parallel_size


def check_root(root: str) -> None:
    """UserError naming ``eval.bench.root`` when it is not a local folder."""
    if not os.path.isdir(os.path.expanduser(root)):
        raise UserError(f"eval.bench.root: {root} is not a folder (a bench folder: *.jsonl tests and "
                        "pdfs/; python -m olmocr.datasets dataset=olmocr_bench fetches olmOCR-bench)")


@runtime("output_dir")
class BenchEval:
    """The bench eval of a run: ``root`` a bench folder (``*.jsonl`` tests, ``pdfs/``); ``count`` pages of it
    (null: all) chosen with ``seed``, spread over its categories; ``steps`` render and prompt them;
    ``max_new_tokens`` per answer; ``batch_size`` pages per ``generate`` call on each rank; ``engine``:
    transformers, vllm (GRPO's colocated engine) or auto (vLLM where GRPO runs it colocated, else
    transformers); ``fallback``: an answer that is none (cut off, no front matter) gives the page's text layer,
    as the pipeline does (false: it is scored as written, the model's own reading); ``report_pages``: pages
    shown in the HTML report of the best eval."""

    def __init__(self, root: str, steps: dict, output_dir: str,
                 count: Annotated[int | None, Range(at_least=1, null="every page")] = 64, seed: int = 0,
                 max_new_tokens: Annotated[int, Range(at_least=1)] = 8000,
                 batch_size: Annotated[int, Range(at_least=1)] = 8, engine: Annotated[str, OneOf(*ENGINES)] = "auto",
                 fallback: bool = True, report_pages: Annotated[int, Range(at_least=0)] = 50):
        self.root, self.steps, self.count, self.seed = root, steps, count, seed
        self.max_new_tokens, self.batch_size, self.engine = max_new_tokens, batch_size, engine
        self.text_layer, self.report_pages = fallback, report_pages
        self.dir = os.path.join(output_dir, "bench_eval")
        self.pages: list[tuple[str, int]] = []
        self.bench = None
        self.pipeline = None

    # -- before the model loads ----------------------------------------------------------------------------------
    def load(self) -> BenchEval:
        """Read the bench and choose the pages; a wrong folder or steps are one line, before any model loads."""
        from olmocr.bench import equations
        from olmocr.bench.score import Bench, load_bench
        from olmocr.data.chain import build_pipeline
        from olmocr.data.steps import BuildMessages

        check_root(self.root)
        try:
            bench = load_bench(self.root)
        except ValueError as exc:
            raise UserError(f"eval.bench.root: {exc}") from None
        for line in bench.malformed:
            log.warning("bench eval: malformed test, skipped: %s", line)
        self.pages = self.sample(bench.tests)
        chosen = set(self.pages)
        tests = [(c, t) for c, t in bench.tests if (t.pdf, t.page) in chosen]
        self.bench = Bench(tests=tests, malformed=bench.malformed, warnings=bench.warnings, root=bench.root)
        if any(test.type == "math" for _, test in tests):
            equations.render("x")  # math tests need Node and KaTeX: fail now, not at the first eval
        self.pipeline = build_pipeline(self.steps)
        if not any(isinstance(s, BuildMessages) for s in self.pipeline.steps.values()):
            raise UserError("eval.bench.steps: the pages need a 'messages' step (olmocr.data.steps.BuildMessages)")
        categories = sorted({c for c, _ in tests})
        log.info("bench eval: %d pages, %d tests in %d categories (%s) of %s", len(self.pages), len(tests),
                 len(categories), ", ".join(categories), self.root)
        return self

    def sample(self, tests) -> list[tuple[str, int]]:
        """``count`` pages, taken in turn from each category's own shuffled list, so every category is in
        the sample; the same pages for the same bench and seed."""
        by_category: dict[str, list] = {}
        seen = set()
        for category, test in tests:
            if (test.pdf, test.page) not in seen:
                seen.add((test.pdf, test.page))
                by_category.setdefault(category, []).append((test.pdf, test.page))
        rng = random.Random(self.seed)
        queues = []
        for name in sorted(by_category):
            pages = sorted(by_category[name])
            rng.shuffle(pages)
            queues.append(pages)
        wanted = len(seen) if self.count is None else min(self.count, len(seen))
        chosen = []
        for turn in range(max(map(len, queues), default=0)):
            chosen += [q[turn] for q in queues if turn < len(q)][: wanted - len(chosen)]
        return sorted(chosen)

    def metric_names(self) -> list[str]:
        categories = sorted({c for c, _ in self.bench.tests})
        types = sorted({t.type for _, t in self.bench.tests})
        return ["eval/bench/overall", "eval/bench/overall_score", "eval/bench/parsed", "eval/bench/output_tokens",
                *(f"eval/bench/category/{c}" for c in categories), *(f"eval/bench/type/{t}" for t in types)]

    def decoder(self, model, processor, device, *, autocast_dtype=None, synced: bool = False, trainer=None):
        """The engine of ``engine`` for this run: ``trainer``, GRPO's trl trainer when it runs vLLM colocated."""
        colocated = trainer is not None and getattr(trainer, "vllm_generation", None) is not None \
            and getattr(trainer.vllm_generation, "mode", None) == "colocate"
        if self.engine == "vllm" and not colocated:
            raise UserError("eval.bench.engine=vllm decodes with GRPO's colocated vLLM engine: use "
                            "algo.generation=vllm_colocate, or engine=transformers (or auto)")
        if self.engine != "transformers" and colocated:
            return VllmDecoder(trainer, processor, self.max_new_tokens)
        return TransformersDecoder(model, processor, self.max_new_tokens, device, autocast_dtype, synced)

    # -- an eval ---------------------------------------------------------------------------------------------------
    def evaluate(self, decoder, step: int, rank: int = 0, world_size: int = 1) -> dict:
        """Decode, gather, write and score; the metrics on every rank."""
        import torch.distributed as dist

        with preserved_rng():
            start = time.perf_counter()
            if isinstance(decoder, VllmDecoder):
                decoder.sync()
            group = decoder.group if isinstance(decoder, VllmDecoder) else 1
            shards = max(1, world_size // group)
            mine = self.pages[rank // group::shards]
            results = self.decode(decoder, mine, world_size)
            parts = [results]
            if world_size > 1:
                parts = [None] * world_size
                dist.all_gather_object(parts, results)
            metrics = None
            if rank == 0:
                merged = {(r["pdf"], r["page"]): r for part in parts for r in part}  # a TP group's ranks agree
                metrics = self.write_and_score(step, [merged[key] for key in sorted(merged)],
                                               time.perf_counter() - start)
            if world_size > 1:
                box = [metrics]
                dist.broadcast_object_list(box, src=0)
                metrics = box[0]
        return metrics

    def decode(self, decoder, pages: list[tuple[str, int]], world_size: int) -> list[dict]:
        from olmocr.data.steps import Reject

        rendered, results = [], []
        for pdf, page in pages:
            path = os.path.join(self.root, "pdfs", pdf)
            try:
                sample = self.pipeline({"pdf_path": path, "page": page})
            except Reject as exc:
                results.append(self.fallback(pdf, page, f"{UNRENDERED}{exc}", 0))
                continue
            rendered.append((pdf, page, sample))
        batches = [rendered[i:i + self.batch_size] for i in range(0, len(rendered), self.batch_size)]
        calls = len(batches)
        if getattr(decoder, "synced", False) and world_size > 1:
            calls = self.most_calls(calls)
        for i in range(calls):
            if i >= len(batches):  # a rank with fewer pages keeps pace with the others, its answers unused
                decoder([self.padding_sample()])
                continue
            for (pdf, page, _), answer in zip(batches[i], decoder([s for _, _, s in batches[i]])):
                results.append(self.judge(pdf, page, answer))
        return results

    @staticmethod
    def most_calls(calls: int) -> int:
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([calls])
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def padding_sample(self) -> dict:
        pdf, page = self.pages[0]
        return self.pipeline({"pdf_path": os.path.join(self.root, "pdfs", pdf), "page": page})

    def judge(self, pdf: str, page: int, answer: Answer) -> dict:
        from olmocr.formats.frontmatter import read_answer

        judged = read_answer(answer.text, answer.finish_reason, self.max_new_tokens, self.pipeline.answer)
        if isinstance(judged, str):
            if not self.text_layer:
                return {"pdf": pdf, "page": page, "text": answer.text, "parsed": False, "outcome": judged,
                        "output_tokens": answer.tokens}
            # The candidate is the text layer; what the model wrote stays in pages.jsonl, to look at.
            return {**self.fallback(pdf, page, judged, answer.tokens), "answer": answer.text}
        return {"pdf": pdf, "page": page, "text": judged.text, "parsed": True, "outcome": "ok",
                "output_tokens": answer.tokens,
                **({"blocks": [b.to_dict() for b in judged.blocks]} if judged.blocks is not None else {})}

    def fallback(self, pdf: str, page: int, why: str, tokens: int) -> dict:
        """The page's text layer, as the pipeline falls back to it ('' when the PDF has none)."""
        from olmocr.formats.pdf import PdfError, text_layer

        if not self.text_layer:
            return {"pdf": pdf, "page": page, "text": "", "parsed": False, "outcome": why, "output_tokens": tokens}
        try:
            text = text_layer(os.path.join(self.root, "pdfs", pdf), page)
        except PdfError as exc:
            text, why = "", f"{why}; no text layer: {exc}"
        return {"pdf": pdf, "page": page, "text": text, "parsed": False, "outcome": why, "output_tokens": tokens}

    def write_and_score(self, step: int, results: list[dict], seconds: float) -> dict:
        from olmocr.bench.layout import describe as describe_layout
        from olmocr.bench.layout import score_candidates
        from olmocr.bench.report import write_reports
        from olmocr.bench.score import (candidate_files, candidate_stem, describe_makeup, record_answers, run_tests,
                                        summarize)
        from olmocr.formats.prompts import BLOCKS
        from olmocr.formats.structure import SUFFIX as BLOCKS_SUFFIX

        folder = os.path.join(self.dir, STEP_DIR.format(step))
        shutil.rmtree(folder, ignore_errors=True)  # a step evaluated again after a resume starts clean
        candidates = os.path.join(folder, "candidates")
        answers = []
        for r in results:
            path = candidate_stem(candidates, r["pdf"], r["page"]) + "_repeat1.md"
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(r["text"])
            if r.get("blocks") is not None:  # the model writes blocks: scored for layout beside the text
                with open(path[:-3] + BLOCKS_SUFFIX, "w", encoding="utf-8") as fh:
                    json.dump({"blocks": [{"order": n, **b} for n, b in enumerate(r["blocks"])]}, fh,
                              ensure_ascii=False)
            # Without the fallback an unparsed answer is still what the model wrote: its own reading.
            answers.append((path, r["parsed"] or (not self.text_layer and not r["outcome"].startswith(UNRENDERED))))
        record_answers(candidates, answers)
        with open(os.path.join(folder, "pages.jsonl"), "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({k: v for k, v in r.items() if k != "text"}, ensure_ascii=False) + "\n"
                          for r in results)
        tests = run_tests(self.bench, candidates, scoring="strict")  # a blank page earns nothing (checks.py)
        summary = summarize(tests)
        makeup = summary["makeup"]
        if self.pipeline.answer == BLOCKS:  # layout where the pages' truth has blocks (none: no figures)
            layout = score_candidates(self.root, self.pages, lambda pdf, page: candidate_files(candidates, pdf, page))
            if layout is not None:
                summary["layout"] = layout
        write_reports(folder, summary, tests, self.bench, bench_dir=self.root, candidates=candidates,
                      max_failures_listed=50)
        metrics = {"eval/bench/overall": summary["overall"], "eval/bench/overall_score": summary["overall_score"],
                   "eval/bench/parsed": sum(r["parsed"] for r in results) / max(len(results), 1),
                   "eval/bench/output_tokens": sum(r["output_tokens"] for r in results) / max(len(results), 1),
                   "eval/bench/answered": makeup["answered"] / max(makeup["pages"], 1)}
        if makeup["cer"] is not None:
            metrics["eval/bench/cer"] = makeup["cer"]
        metrics.update({f"eval/bench/category/{name}": row["pass_rate"] for name, row in summary["categories"].items()})
        metrics.update({f"eval/bench/type/{name}": row["pass_rate"] for name, row in summary["types"].items()})
        metrics["perf/bench_eval_pages_per_s"] = len(results) / max(seconds, 1e-9)
        if "layout" in summary:
            metrics.update({f"eval/bench/layout/{name}": summary["layout"][name]["mean"] or 0.0
                            for name in ("f1", "mean_iou", "label_accuracy", "order_accuracy")})
        unrendered = [r for r in results if r["outcome"].startswith(UNRENDERED)]
        if unrendered:  # a storage brownout mid-eval, or pages damaged since the run began
            log.warning("bench eval at step %d: %d of %d pages could not be rendered and were scored as their text "
                        "layer or nothing (first: %s %s)", step, len(unrendered), len(results), unrendered[0]["pdf"],
                        unrendered[0]["outcome"])
        log.info("bench eval at step %d: overall %.1f%% over %d tests (strict scoring); %s; %.0f output tokens "
                 "per page, %.1f pages/s (%s)", step, 100 * summary["overall"], summary["tests"],
                 describe_makeup(makeup), metrics["eval/bench/output_tokens"], metrics["perf/bench_eval_pages_per_s"],
                 folder)
        if "layout" in summary:
            log.info("bench eval at step %d: %s", step, describe_layout(summary["layout"]))
        return metrics

    # -- after training ----------------------------------------------------------------------------------------------
    def evaluated_steps(self) -> dict[int, float]:
        """Overall score of every eval written so far (this run and the runs it resumed)."""
        found = {}
        for path in glob.glob(os.path.join(self.dir, "step_*", "results.json")):
            with open(path, encoding="utf-8") as fh:
                found[int(os.path.basename(os.path.dirname(path))[5:])] = json.load(fh)["overall"]
        return found

    def write_report(self, step: int | None = None) -> str | None:
        """``bench_eval/report.html``: the eval of ``step`` (default: the best overall), each page beside its
        output; None when no eval was written."""
        from olmocr.bench.html import write_html
        from olmocr.bench.score import run_tests, summarize

        scores = self.evaluated_steps()
        if not scores:
            return None
        if step is None or step not in scores:
            step = max(scores, key=lambda s: (scores[s], -s))  # the first to reach it, as keep_best keeps
        candidates = os.path.join(self.dir, STEP_DIR.format(step), "candidates")
        tests = run_tests(self.bench, candidates, scoring="strict")
        path = write_html(os.path.join(self.dir, "report.html"), self.root,
                          [(candidates, summarize(tests), tests)], self.report_pages)
        log.info("bench eval: report of step %d (overall %.1f%%): %s", step, 100 * scores[step], path)
        return path

