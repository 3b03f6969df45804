"""Does a candidate model (an FP8 version, a vLLM deployment) decode like its reference?

The candidate greedy-decodes each page (vLLM when a GPU is present, else transformers; engine=vllm
runs vLLM's CPU build too) and says how likely it found each token it chose. The reference then reads the prompt
plus those tokens in one forward pass and says, at every position, which token it would have chosen
and how likely it finds the candidate's. Per page: the share of positions where both choose the same
token, the first position where they do not, and the gap between their probabilities of the
candidate's token there; a page whose gap exceeds the threshold is flagged.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass

import torch
from tqdm import tqdm

from olmocr.checkpoints.pages import model_inputs
from olmocr.checkpoints.schema import ENGINES
from olmocr.errors import UserError

log = logging.getLogger(__name__)

@dataclass
class Generation:
    tokens: list[int]
    probs: list[float]  # the candidate's probability of each token it chose
    prompt_ids: list[int] | None = None  # the candidate's own prompt tokens, when its engine reports them


@dataclass
class PageResult:
    page_id: str
    tokens: int
    matches: int
    match_rate: float
    first_mismatch: int | None
    gap: float  # |p_candidate - p_reference| of the candidate's token at the first mismatch (0 without one)
    candidate_token: str | None
    reference_token: str | None
    prompt_match: bool | None  # both engines built the same prompt tokens (None: not reported)
    flagged: bool


def choose_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise UserError(f"engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    if engine != "auto":
        return engine
    import importlib.util

    return "vllm" if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available() else "transformers"


class TransformersEngine:
    def __init__(self, model, processor, device: str):
        self.model, self.processor, self.device = model.eval(), processor, device

    @torch.no_grad()
    def generate(self, pages: list[dict], max_new_tokens: int) -> list[Generation]:
        from transformers import GenerationConfig

        eos = self.model.generation_config.eos_token_id
        # plain greedy: the model's own generation config may add penalties that the reference cannot see
        config = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos,
                                  pad_token_id=self.processor.tokenizer.pad_token_id)
        out = []
        for page in tqdm(pages, desc="candidate", unit="page"):
            inputs = model_inputs(self.processor, page).to(self.device)
            result = self.model.generate(**inputs, generation_config=config, output_logits=True,
                                         return_dict_in_generate=True)
            tokens = result.sequences[0, inputs["input_ids"].shape[1]:].tolist()
            probs = [torch.softmax(logits[0].float(), -1)[token].item() for logits, token in zip(result.logits, tokens)]
            out.append(Generation(tokens, probs))
        return out


class VllmEngine:
    def __init__(self, folder: str, processor, gpu_memory_utilization: float, max_model_len: int | None,
                 dtype: str = "auto"):
        from vllm import LLM

        from olmocr.utils.vllm_cpu import offline_engine_kwargs

        self.processor = processor
        self.llm = LLM(model=folder, gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                       limit_mm_per_prompt={"image": 1}, seed=0, **offline_engine_kwargs(dtype))

    def generate(self, pages: list[dict], max_new_tokens: int) -> list[Generation]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, logprobs=1, repetition_penalty=1.0)
        prompts = [{"prompt": self.processor.apply_chat_template(page["messages"], tokenize=False,
                                                                 add_generation_prompt=True),
                    "multi_modal_data": {"image": page["image"]}} for page in pages]
        out = []
        for result in self.llm.generate(prompts, params):
            completion = result.outputs[0]
            tokens = list(completion.token_ids)
            probs = [math.exp(step[token].logprob) for step, token in zip(completion.logprobs, tokens)]
            out.append(Generation(tokens, probs, list(result.prompt_token_ids)))
        return out


@torch.no_grad()
def rescore(model, processor, page: dict, generation: Generation, threshold: float, device: str) -> PageResult:
    """Read the prompt plus the candidate's tokens with the reference and compare choices."""
    inputs = model_inputs(processor, page).to(device)
    prompt_ids = inputs["input_ids"][0].tolist()
    tokens = generation.tokens
    if tokens:
        generated = torch.tensor([tokens], device=device)
        for key in ("mm_token_type_ids", "token_type_ids"):  # generated tokens are text
            if key in inputs:
                inputs[key] = torch.cat([inputs[key], torch.zeros_like(generated)], dim=1)
        inputs["input_ids"] = torch.cat([inputs["input_ids"], generated], dim=1)
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        # the logits at the last len(tokens)+1 positions; the first len(tokens) predict the tokens
        logits = model(**inputs, logits_to_keep=len(tokens) + 1).logits[0, :len(tokens)]
        probs = torch.softmax(logits.float(), -1)
        chosen = probs.argmax(-1).tolist()
        reference = probs[torch.arange(len(tokens)), torch.tensor(tokens)].tolist()
    else:
        chosen, reference = [], []
    matches = [a == b for a, b in zip(tokens, chosen)]
    first = next((i for i, same in enumerate(matches) if not same), None)
    gap = abs(generation.probs[first] - reference[first]) if first is not None else 0.0

    def text(token):
        return processor.tokenizer.decode([token]) if token is not None else None

    return PageResult(
        page_id=page["page_id"], tokens=len(tokens), matches=sum(matches),
        match_rate=sum(matches) / len(tokens) if tokens else 1.0, first_mismatch=first, gap=gap,
        candidate_token=text(tokens[first]) if first is not None else None,
        reference_token=text(chosen[first]) if first is not None else None,
        prompt_match=None if generation.prompt_ids is None else generation.prompt_ids == prompt_ids,
        flagged=gap > threshold)


def compare(reference: str, candidate: str, pages: list[dict], steps: dict, engine: str = "auto",
            max_new_tokens: int = 128, threshold: float = 0.2, max_flagged: int = 0, device: str = "auto",
            dtype: str = "auto", gpu_memory_utilization: float = 0.5, max_model_len: int | None = None,
            report_path: str | None = None, storage_wait_s: float = 0.0) -> dict:
    """Render ``pages`` ({pdf_path, page, page_id}) by ``steps``, decode them with the candidate,
    re-score with the reference; the summary. Remote models are read waiting out storage that does not
    answer for up to ``storage_wait_s`` at each read."""
    import os
    import tempfile

    from olmocr.checkpoints.folders import local_copy, model_source, resolve
    from olmocr.checkpoints.pages import render_pages

    engine = choose_engine(engine)
    if not 0 <= threshold <= 1:
        raise UserError(f"threshold: a probability gap between 0 and 1, got {threshold}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    models = {key: resolve(given, key=key, wait_s=storage_wait_s)
              for key, given in (("reference", reference), ("candidate", candidate))}
    for key, checkpoint in models.items():
        if checkpoint.kind != "full":
            raise UserError(f"{key}: {checkpoint.given} is a LoRA adapter; merge it first (python -m olmocr.prepare)")
    pages = render_pages(pages, steps, report_path)
    with tempfile.TemporaryDirectory(prefix="olmocr-compare-") as work:
        source = model_source(local_copy(models["candidate"], os.path.join(work, "candidate")), "candidate", dtype)
        processor = source.load_processor()
        if engine == "vllm":
            generator = VllmEngine(source.path, processor, gpu_memory_utilization, max_model_len, dtype)
        else:
            generator = TransformersEngine(source.load_model(device), processor, device)
        generations = generator.generate(pages, max_new_tokens)
        del generator  # one model at a time
        source = model_source(local_copy(models["reference"], os.path.join(work, "reference")), "reference", dtype)
        model, processor = source.load_model(device).eval(), source.load_processor()
        results = [rescore(model, processor, page, generation, threshold, device)
                   for page, generation in tqdm(list(zip(pages, generations)), desc="reference", unit="page")]
    summary = summarize(results, threshold, max_flagged)
    summary.update(reference=models["reference"].path, candidate=models["candidate"].path, engine=engine)
    return summary


def summarize(results: list[PageResult], threshold: float, max_flagged: int) -> dict:
    tokens = sum(r.tokens for r in results)
    mismatched = [r for r in results if r.first_mismatch is not None]
    flagged = sum(r.flagged for r in results)
    return {
        "pages": len(results), "tokens": tokens,
        "match_rate": sum(r.matches for r in results) / tokens if tokens else 1.0,
        "pages_with_mismatch": len(mismatched),
        "mean_first_mismatch": (sum(r.first_mismatch for r in mismatched) / len(mismatched)) if mismatched else None,
        "mean_gap": (sum(r.gap for r in mismatched) / len(mismatched)) if mismatched else 0.0,
        "max_gap": max((r.gap for r in results), default=0.0),
        "prompt_mismatches": sum(r.prompt_match is False for r in results),
        "threshold": threshold, "flagged": flagged, "max_flagged": max_flagged, "passed": flagged <= max_flagged,
        "results": [asdict(r) for r in results],
    }


def markdown(summary: dict, reference: str, candidate: str) -> str:
    verdict = "passed" if summary["passed"] else "FAILED"
    lines = [
        f"# {candidate} against {reference}", "",
        f"Candidate decoded greedily with {summary['engine']}; reference re-scored with transformers.", "",
        f"**{verdict}**: {summary['flagged']} of {summary['pages']} pages flagged (gap over "
        f"{summary['threshold']:.2f}; at most {summary['max_flagged']} allowed). Token match rate "
        f"{summary['match_rate']:.4f} over {summary['tokens']} tokens; {summary['pages_with_mismatch']} pages "
        f"with a mismatch; largest gap {summary['max_gap']:.3g}."
        + (f" On {summary['prompt_mismatches']} pages the candidate's prompt tokens differ from the reference "
           "processor's." if summary["prompt_mismatches"] else ""), "",
        "| page | tokens | match rate | first mismatch | gap | candidate / reference token | flagged |",
        "| --- | ---: | ---: | ---: | ---: | --- | :---: |",
    ]
    for r in summary["results"]:
        first = "" if r["first_mismatch"] is None else str(r["first_mismatch"])
        pair = "" if r["first_mismatch"] is None else f"`{r['candidate_token']!r}` / `{r['reference_token']!r}`"
        lines.append(f"| {r['page_id']} | {r['tokens']} | {r['match_rate']:.4f} | {first} | {r['gap']:.3g} | "
                     f"{pair} | {'yes' if r['flagged'] else ''} |")
    return "\n".join(lines) + "\n"
