import os
import random

import pytest
import torch
from PIL import Image

from conftest import SAMPLE, v4_steps
from olmocr.config import compose
from olmocr.data.chain import build_pipeline
from olmocr.data.steps import IGNORE_INDEX
from olmocr.models import TinyModel
from olmocr.models.families import FAMILIES

PAGE = os.path.join(SAMPLE, "train", "pdfs", "synth_s0_00000")


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_model(request, cache_dir):
    return TinyModel(family=request.param, cache_dir=os.path.join(cache_dir, "models"))


def test_tiny_builds_reloads_and_generates(family_model):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(family_model.path)
    assert type(processor).__name__ == family_model.family.processor_class
    assert processor.tokenizer.convert_tokens_to_ids("<|image_pad|>") != processor.tokenizer.unk_token_id
    model = family_model.load_model()
    assert type(model).__name__ == family_model.family.model_class
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    messages = [{"role": "user", "content": [{"type": "text", "text": "Read the page."}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=[Image.new("RGB", (180, 240), "white")], return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4


def test_compiling_leaves_a_vision_tower_eager_unless_it_runs_flash_attention(family_model):
    """Under sdpa the vision blocks split their packed windows in Python (a graph break and one compile per
    window count); under flash attention they are one graph like the decoder layers."""
    from olmocr.models.loader import compile_blocks

    def compiled(model):
        return {type(m).__name__ for m in model.modules() if getattr(m, "_compiled_call_impl", None) is not None}

    model = family_model.load_model()
    layers = model.config.text_config.num_hidden_layers
    assert compile_blocks(model, "eager") == layers
    assert compiled(model) == {n for n in model._no_split_modules if "Decoder" in n}
    model = family_model.load_model()
    model.model.visual.config._attn_implementation = "flash_attention_2"
    assert compile_blocks(model, "eager") == layers + model.config.vision_config.depth
    assert compiled(model) == set(model._no_split_modules)


def test_tiny_is_built_once_and_keyed_on_its_config(cache_dir):
    a = TinyModel(cache_dir=os.path.join(cache_dir, "models"))
    stamp = os.path.getmtime(os.path.join(a.path, "config.json"))
    again = TinyModel(cache_dir=os.path.join(cache_dir, "models"))
    assert again.path == a.path and os.path.getmtime(os.path.join(again.path, "config.json")) == stamp
    other = TinyModel(cache_dir=os.path.join(cache_dir, "models"), num_layers=1)
    assert other.cache_path != a.cache_path


def test_tiny_weights_are_deterministic(tmp_path):
    from safetensors.torch import load_file

    a = TinyModel(cache_dir=str(tmp_path / "a"), vocab_size=600)
    b = TinyModel(cache_dir=str(tmp_path / "b"), vocab_size=600)
    wa, wb = load_file(os.path.join(a.path, "model.safetensors")), load_file(os.path.join(b.path, "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_bad_model_settings_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="model.family: unknown family 'llava'"):
        TinyModel(family="llava", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"^model.dtype: expected one of float32, bfloat16, float16, got 'fp8'$"):
        compose("check_data", ["model.dtype=fp8"])
    with pytest.raises(ValueError, match="hidden_size 60 must split into 8 heads"):
        TinyModel(hidden_size=60, num_heads=8, cache_dir=str(tmp_path))


def test_label_masking_with_each_family_processor(family_model):
    processor = family_model.load_processor()
    sample = build_pipeline(v4_steps(300), processor=processor)(
        {"md_path": PAGE + ".md", "pdf_path": PAGE + ".pdf", "rng": random.Random(0)})
    ids, labels = sample["input_ids"], sample["labels"]
    first = int((labels != IGNORE_INDEX).nonzero()[0])
    # Everything before the target is the prompt (system turn, instruction, image, assistant header).
    assert processor.tokenizer.decode(ids[:first]).endswith("<|im_start|>assistant\n")
    assert processor.tokenizer.decode(ids[first:]) == sample["target"] + "<|im_end|>\n"
    assert processor.tokenizer.decode(ids[labels != IGNORE_INDEX]) == sample["target"] + "<|im_end|>"
    model = family_model.load_model()
    per_token = {k: sample[k][None] for k in ("input_ids", "attention_mask", "labels", "mm_token_type_ids") if k in sample}
    out = model(**per_token, pixel_values=sample["pixel_values"], image_grid_thw=sample["image_grid_thw"])
    assert torch.isfinite(out.loss)


@pytest.mark.integration
def test_concurrent_builds_wait_for_one_another(tmp_path, warm_python):
    """Ranks of one job build the same tiny model at once: one builds, the others reuse it."""
    import subprocess

    code = ("import sys; from olmocr.models import TinyModel; "
            "print(TinyModel(cache_dir=sys.argv[1], vocab_size=700).path)")
    procs = [subprocess.Popen([warm_python, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(paths) == 1
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(next(iter(paths))),
                                                   os.path.basename(next(iter(paths))) + ".lock"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU prints")
def test_saving_a_model_without_a_gpu_says_nothing_of_gpus(tmp_path, tiny, warm_python):
    """transformers' save_pretrained imports DeepSpeed (accelerate checks for its engine), whose accelerator probe
    warned on every CPU run of a GPU it "was unable to detect"."""
    import subprocess

    code = ("import sys; from olmocr.models import TinyModel; from olmocr.models.source import save_model; "
            "tiny = TinyModel(cache_dir=sys.argv[1]); save_model(tiny.load_model(), tiny.load_processor(), sys.argv[2])")
    proc = subprocess.run([warm_python, "-c", code, os.path.dirname(tiny.path), str(tmp_path / "saved")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert os.path.exists(tmp_path / "saved" / "model.safetensors")
    assert "unable to detect" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_a_hub_id_the_hub_cannot_serve_fails_at_once_or_loads_from_the_cache(tmp_path, tiny, monkeypatch, caplog):
    """The Hub's endpoint refuses connections (a compute node without internet): a hub id missing from the cache
    is one line before transformers' retries (a minute and more of them, a warning each), and one in the cache
    loads from it, with one warning saying so (the model servers the pipeline starts get HF_HUB_OFFLINE=1)."""
    import shutil
    import socket

    import huggingface_hub.constants as constants

    from olmocr.models import HubModel

    with socket.socket() as closed:  # a port nothing listens on once this closes
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    caplog.set_level("WARNING")
    missing = HubModel("olmocr-test/tiny-vlm", family="qwen2_5_vl", dtype="float32")
    with pytest.raises(ValueError) as info:
        missing.load_processor()
    assert str(info.value) == (
        f"model.name_or_path: olmocr-test/tiny-vlm is not in the local Hugging Face cache ({tmp_path / 'hub'}) and "
        "the Hub cannot be reached (ConnectError: [Errno 111] Connection refused); download it where the Hub answers "
        "(the same HF_HOME), or give a local folder")
    # The cache's layout: a ref naming a commit, whose snapshot holds the files.
    repo = tmp_path / "hub" / "models--olmocr-test--tiny-vlm"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(tiny.path, repo / "snapshots" / commit)
    cached = HubModel("olmocr-test/tiny-vlm", family="qwen2_5_vl", dtype="float32")
    processor, model = cached.load_processor(), cached.load_model()
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration" and processor.tokenizer is not None
    assert torch.equal(next(model.parameters()), next(tiny.load_model().parameters()))
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "Retrying" in m or "thrown while requesting" in m], said
    assert said == ["the Hub cannot be reached (ConnectError: [Errno 111] Connection refused): olmocr-test/tiny-vlm "
                    "loads from the local cache"]
    assert cached.server_env() == {"HF_HUB_OFFLINE": "1"}


def test_the_reader_is_a_qwen25_vl_with_heads_of_32_sized_for_reading_pages(cache_dir):
    """model=reader: the 7B's family, heads of 32 in the language model and the vision tower (vLLM's CPU
    attention takes no smaller), a reading page's line one row of image tokens, a RoPE whose image columns
    the language model can tell apart, and a tokenizer that spells the words it reads."""
    from PIL import Image
    from transformers import AutoConfig

    from olmocr.config import build, compose
    from olmocr.formats.prompts import build_prompt
    from olmocr.synth.text import WORDS

    source = build(compose("train", ["model=reader", f"paths.cache={cache_dir}"]).model)
    config = AutoConfig.from_pretrained(source.path)
    assert config.model_type == "qwen2_5_vl"
    text, vision = config.text_config, config.vision_config
    assert text.hidden_size // text.num_attention_heads == 32
    assert vision.hidden_size // vision.num_heads == 32
    # The image column's share of a head's rotary frequencies are its lowest; at theta 20 neighbours differ by
    # more than 0.05 radian (at 10000: under 0.004).
    lowest = text.rope_parameters["rope_theta"] ** (-(text.hidden_size // text.num_attention_heads // 2 - 1) / 16)
    assert lowest > 0.05
    page = Image.new("RGB", (448, 84), "white")  # a one-line reading page at longest_side 448
    processor = source.load_processor()
    grid = processor.image_processor(images=[page], return_tensors="pt")["image_grid_thw"]
    assert grid.tolist() == [[1, 6, 32]]  # 14-pixel patches: 3 rows of 16 image tokens of 28 pixels
    tokenizer, tiny = processor.tokenizer, build(compose("train", [f"paths.cache={cache_dir}"]).model)
    words = sorted(set(WORDS["en"]))
    spelled = [len(tokenizer(" " + w)["input_ids"]) for w in words]
    assert sum(spelled) / len(words) > 3  # letters and short pieces, where the tiny model's are mostly whole words
    assert sum(len(tiny.load_processor().tokenizer(" " + w)["input_ids"]) for w in words) / len(words) < 2
    with pytest.raises(Exception, match="model.tokenizer: expected one of words, letters, blocks, got 'letter'"):
        compose("train", ["model=reader", "model.tokenizer=letter"])
    # and the prompt, which it learnt its merges from, is shorter than in the tiny model's tokens
    assert len(tokenizer(build_prompt("v4"))["input_ids"]) < 0.6 * len(tiny.load_processor().tokenizer(build_prompt("v4"))["input_ids"])
    # The reader's own instruction (conf/data/reading.yaml) is a fraction of v4's: most of a line page's sequence
    # is then the page and its text.
    reader = compose("train", ["+experiment=read_tiny"]).data.steps.prompt.version
    assert len(tokenizer(build_prompt(reader))["input_ids"]) < 0.25 * len(tokenizer(build_prompt("v4"))["input_ids"])
