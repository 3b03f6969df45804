"""Every per-sample step on real PDFs rendered with poppler."""

import dataclasses
import os
import random
import signal
import threading
import time

import pytest
import torch
from PIL import ImageChops
from conftest import SAMPLE, v4_steps, write_encrypted_pdf, write_pdf

from olmocr.config import compose
from olmocr.data.chain import build_pipeline
from olmocr.formats.prompts import PROMPT_V4
from olmocr.data.steps import (
    IGNORE_INDEX,
    AnchorText,
    AnnotateTables,
    BuildMessages,
    BuildPrompt,
    BuildTarget,
    CheckPdf,
    DropRotated,
    NormalizeLatex,
    ParseFrontMatter,
    RandomTokenFlip,
    Reject,
    RenderPage,
    RotationAugmentation,
    RuleFilter,
)
from olmocr.formats.frontmatter import PageMeta
from olmocr.formats.render import RenderError, render_page

TRAIN = os.path.join(SAMPLE, "train", "pdfs")


def sample_for(stem: str, **extra) -> dict:
    return {"md_path": os.path.join(TRAIN, stem + ".md"), "pdf_path": os.path.join(TRAIN, stem + ".pdf"),
            "rng": random.Random(0), **extra}


def first_page(predicate) -> str:
    from olmocr.formats.frontmatter import parse_document

    for name in sorted(os.listdir(TRAIN)):
        if name.endswith(".md"):
            with open(os.path.join(TRAIN, name)) as fh:
                meta, text = parse_document(fh.read())
            if predicate(meta, text):
                return name[:-3]
    raise AssertionError("no bundled page matches")


def test_render_longest_side_and_orientation(tmp_path):
    pdf = write_pdf(str(tmp_path / "p.pdf"), ["Portrait page"])
    image = render_page(pdf, 1, 1288)
    assert max(image.size) == 1288 and image.size[0] < image.size[1]
    # A page with /Rotate 90 renders landscape: the image shows what the model will see.
    rotated = render_page(write_pdf(str(tmp_path / "r.pdf"), ["Sideways"], rotate=90), 1, 640)
    assert max(rotated.size) == 640 and rotated.size[0] > rotated.size[1]


def test_render_matches_the_pdfinfo_dpi_png_pixels(tmp_path):
    """Exactly the pixels of pdfinfo + `pdftoppm -png -r <dpi>` (how released models' pages were rendered),
    on Letter, A4, landscape and rotated pages."""
    import re
    import subprocess

    from PIL import Image

    pdfs = [os.path.join(TRAIN, n) for n in sorted(os.listdir(TRAIN)) if n.endswith(".pdf")]
    sizes = set()
    for pdf in pdfs:
        info = subprocess.run(["pdfinfo", pdf], capture_output=True, text=True, check=True).stdout
        width, height = map(float, re.search(r"Page size:\s+([\d.]+) x ([\d.]+)", info).groups())
        sizes.add((width, height))
        dpi = 1288 * 72 / max(width, height)
        subprocess.run(["pdftoppm", "-png", "-r", str(dpi), "-singlefile", pdf, str(tmp_path / "ref")], check=True)
        reference = Image.open(tmp_path / "ref.png").convert("RGB")
        ours = render_page(pdf, 1, 1288)
        assert ours.size == reference.size, pdf
        assert ImageChops.difference(ours, reference).getbbox() is None, pdf
    assert len(sizes) >= 2  # Letter and A4 among the bundled pages


def test_render_reject_on_corrupt_pdf(tmp_path):
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4 this is not a pdf")
    with pytest.raises(Reject) as info:
        RenderPage(256)({"pdf_path": str(bad)})
    assert info.value.reason == "render_failed" and "bad.pdf" in str(info.value)


def test_a_kept_render_is_the_render_and_any_change_to_what_makes_the_pixels_renders_anew(tmp_path, monkeypatch):
    """data.render_cache: the second read of a page is the first one's pixels, without poppler; another size,
    page or edited PDF is rendered; a kept file that does not decode is rendered and written again; a cache
    that cannot be written leaves the run its render."""
    import olmocr.data.steps as steps

    cache = tmp_path / "renders"
    pdf = write_pdf(str(tmp_path / "p.pdf"), ["Page one", "Page two"])
    check = CheckPdf(max_pages=None)
    step = RenderPage(96, render_cache=str(cache))

    def sample(page=1, path=pdf):
        return check({"pdf_path": path, "page": page})

    first = step(sample())["image"]
    kept = sorted(cache.rglob("*.png"))
    assert len(kept) == 1
    renders = []
    real = steps.render_page
    monkeypatch.setattr(steps, "render_page", lambda *a, **k: renders.append(a) or real(*a, **k))
    again = step(sample())["image"]
    assert renders == [] and again.size == first.size and ImageChops.difference(again, first).getbbox() is None
    step(sample(page=2))
    RenderPage(128, render_cache=str(cache))(sample())
    edited = write_pdf(str(tmp_path / "q.pdf"), ["Page one!", "Page two"])
    step(sample(path=edited))
    assert len(renders) == 3 and len(list(cache.rglob("*.png"))) == 4
    kept[0].write_bytes(b"not a png")  # cut short by a full disk, say
    assert ImageChops.difference(step(sample())["image"], first).getbbox() is None and len(renders) == 4
    assert ImageChops.difference(step(sample())["image"], first).getbbox() is None and len(renders) == 4
    # The setting is the stage's (data.render_cache), not the step's: the record of how a model reads pages
    # and the steps' schema do not name it.
    from olmocr.config import schema_for

    assert "render_cache" not in {f.name for f in dataclasses.fields(schema_for(RenderPage))}
    blocked = tmp_path / "file"
    blocked.write_text("")  # a folder that cannot be made
    out = RenderPage(96, render_cache=str(blocked / "renders"))(sample())["image"]
    assert ImageChops.difference(out, first).getbbox() is None


def signal_children(name: str, times: int, stop: threading.Event, sig=signal.SIGTERM) -> list[int]:
    """Send ``sig`` to this process's children running ``name`` as they appear, ``times`` of them, in a
    thread (what a scheduler's SIGTERM to every process of a job does to a tool run at that moment)."""
    hit: list[int] = []

    def watch():
        while len(hit) < times and not stop.is_set():
            for entry in os.listdir("/proc"):
                try:
                    with open(f"/proc/{entry}/stat") as fh:
                        comm, rest = fh.read().split(" (", 1)[1].rsplit(") ", 1)
                except (OSError, IndexError, ValueError):
                    continue
                if comm == name and int(rest.split()[1]) == os.getpid() and int(entry) not in hit:
                    os.kill(int(entry), sig)
                    hit.append(int(entry))
            time.sleep(0.002)

    threading.Thread(target=watch, daemon=True).start()
    return hit


def test_a_render_ended_by_a_signal_for_the_job_is_rendered_again(tmp_path):
    """A scheduler sends SIGTERM to every process of a job it requeues, a pdftoppm at work included: the page
    is rendered again with the same pixels, not dropped as a bad page (a dropped sample changed what a
    resumed run trained on). A tool ended by signals every time is a failure that says so."""
    pdf = write_pdf(str(tmp_path / "p.pdf"), ["Page one " * 8])
    want = render_page(pdf, 1, 6000)  # a big render: the tool runs long enough to be caught at work
    stop = threading.Event()
    try:
        hit = signal_children("pdftoppm", 1, stop)
        got = render_page(pdf, 1, 6000)
        assert len(hit) == 1
        assert ImageChops.difference(got, want).getbbox() is None
        hit = signal_children("pdftoppm", 10, stop)
        with pytest.raises(RenderError, match="ended by SIGTERM 3 times"):
            render_page(pdf, 1, 6000)
        assert len(hit) == 3
    finally:
        stop.set()


def test_parse_front_matter_step(tmp_path):
    sample = ParseFrontMatter()(sample_for(first_page(lambda m, t: m.primary_language == "no")))
    assert sample["meta"].primary_language == "no" and sample["text"]
    broken = tmp_path / "x.md"
    broken.write_text("---\nprimary_language: en\n---\nno other fields")
    with pytest.raises(Reject) as info:
        ParseFrontMatter()({"md_path": str(broken), "pdf_path": None})
    assert info.value.reason == "front_matter" and "is_rotation_valid" in info.value.detail


def test_check_pdf_rejections(tmp_path):
    good = write_pdf(str(tmp_path / "good.pdf"), ["one page"])
    out = CheckPdf()({"pdf_path": good})
    assert out["page_size"] == (612.0, 792.0) and out["pdf_bytes"].startswith(b"%PDF")
    cases = {
        "too_many_pages": write_pdf(str(tmp_path / "two.pdf"), ["one", "two"]),
        "encrypted_pdf": write_encrypted_pdf(str(tmp_path / "enc.pdf")),
        "empty_pdf": str(tmp_path / "empty.pdf"),
        "unreadable_pdf": str(tmp_path / "corrupt.pdf"),
        "missing_pdf": str(tmp_path / "nothere.pdf"),
    }
    (tmp_path / "empty.pdf").write_bytes(b"")
    (tmp_path / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj garbage\n%%EOF")
    for reason, path in cases.items():
        with pytest.raises(Reject) as info:
            CheckPdf()({"pdf_path": path, "md_path": None})
        assert info.value.reason == reason, (reason, info.value)
    assert CheckPdf(max_pages=2)({"pdf_path": cases["too_many_pages"]})["pdf_bytes"]


def test_drop_rotated():
    upright = {"meta": PageMeta(), "md_path": "a.md"}
    assert DropRotated()(upright) is upright
    with pytest.raises(Reject, match="rotated"):
        DropRotated()({"meta": PageMeta(is_rotation_valid=False, rotation_correction=90), "md_path": "a.md"})


def test_rotation_augmentation_label_undoes_the_turn(tmp_path):
    from PIL import ImageChops

    pdf = write_pdf(str(tmp_path / "p.pdf"), ["Top left text"])
    image = render_page(pdf, 1, 400)
    turns = set()
    for seed in range(30):
        sample = RotationAugmentation(1.0)({"image": image, "meta": PageMeta(), "rng": random.Random(seed)})
        meta = sample["meta"]
        assert not meta.is_rotation_valid and meta.rotation_correction in (90, 180, 270)
        turns.add(meta.rotation_correction)
        # Applying the correction (a clockwise turn) gives back the upright render.
        restored = sample["image"].rotate(-meta.rotation_correction, expand=True)
        assert restored.size == image.size
        assert ImageChops.difference(restored, image).getbbox() is None
    assert turns == {90, 180, 270}
    untouched = RotationAugmentation(0.0)({"image": image, "meta": PageMeta(), "rng": random.Random(0)})
    assert untouched["meta"] == PageMeta() and untouched["image"] is image


def test_rotation_augmentation_leaves_already_rotated_pages():
    meta = PageMeta(is_rotation_valid=False, rotation_correction=90)
    out = RotationAugmentation(1.0)({"image": None, "meta": meta, "rng": random.Random(0)})
    assert out["meta"] is meta


def test_anchor_text_has_coordinates_and_cap(tmp_path):
    pdf = write_pdf(str(tmp_path / "p.pdf"), ["First line of text\nSecond line here\nThird"])
    text = AnchorText(4000)({"pdf_path": pdf})["anchor_text"]
    lines = text.split("\n")
    assert lines[0] == "Page dimensions: 612.0x792.0"
    assert lines[1] == "[72x700]First line of text" and lines[2] == "[72x680]Second line here"
    capped = AnchorText(60)({"pdf_path": pdf})["anchor_text"]
    assert len(capped) <= 60 and capped.startswith("Page dimensions")


def test_normalize_latex():
    text = ("Energy $$E = mc^2$$ and inline $a+b$ cost $5 and $10. \\textbf{Bold \\textit{both}} "
            "and \\emph{this} but \\(\\textbf{x}\\) stays.")
    out = NormalizeLatex()({"text": text})["text"]
    assert "\\[E = mc^2\\]" in out and "\\(a+b\\)" in out
    assert "$5 and $10" in out
    assert "**Bold *both***" in out and "*this*" in out
    assert "\\(\\textbf{x}\\)" in out


@pytest.mark.parametrize("text, reason", [
    ("| a | b |\n|---|---|\n| 1 | 2 |", "markdown_table"),
    ("<table><tr><td>1</td></table>", "malformed_html_table"),
    ("<table><td>1</td></table>", "malformed_html_table"),
    ("<table><tr><td colspan='x'>1</td></tr></table>", "malformed_html_table"),
    ("The value \\frac{1}{2} is half", "latex_outside_math"),
    ("x^{2} outside math", "latex_outside_math"),
])
def test_rule_filter_rejects(text, reason):
    with pytest.raises(Reject) as info:
        RuleFilter()({"text": text, "md_path": "p.md"})
    assert info.value.reason == reason


def test_rule_filter_accepts_good_text_and_switches():
    good = ("<table><thead><tr><th>a</th></tr></thead><tbody><tr><td rowspan=\"2\">1</td></tr></tbody></table>"
            " and \\(\\frac{1}{2}\\) and | not a table")
    assert RuleFilter()({"text": good})["text"] == good
    off = RuleFilter(markdown_tables=False, malformed_html_tables=False, latex_outside_math=False)
    assert off({"text": "| a |\n|---|\n\\frac{1}{2} <table>"})


def test_prompts_and_targets():
    v4 = BuildPrompt("v4")({})["prompt"]
    assert v4 == PROMPT_V4 and "front matter" in v4
    v1 = BuildPrompt("v1")({"anchor_text": "Page dimensions: 1x1"})["prompt"]
    assert "RAW_TEXT_START\nPage dimensions: 1x1\nRAW_TEXT_END" in v1
    with pytest.raises(ValueError, match="anchor"):
        BuildPrompt("v1")({})
    with pytest.raises(ValueError, match="v1, v4"):
        BuildPrompt("v9")
    meta = PageMeta(primary_language="no")
    fm = BuildTarget("front_matter")({"meta": meta, "text": "Tekst"})["target"]
    assert fm.startswith("---\nprimary_language: no\n") and fm.endswith("---\nTekst\n")
    js = BuildTarget("json")({"meta": meta, "text": "Tekst"})["target"]
    assert '"natural_text": "Tekst"' in js
    with pytest.raises(ValueError, match="front_matter, json"):
        BuildTarget("yaml")


def test_annotate_tables_modes():
    text = ('Intro <table border="1"><tr><th colspan="2">Head</th></tr><tr><td>a</td><td>' + "b" * 60 + "</td></tr>"
            '<tr><td rowspan="2">c</td><td>d</td></tr></table> then <TABLE data-totalrows="9"><tr><td>q</td></tr></TABLE>')
    dims = AnnotateTables("annotate_dims")({"text": text})["text"]
    # the grid with spans laid out: the last row span reaches a fourth row; a tag with dims is kept
    assert '<table border="1" data-totalrows="4" data-totalcols="2"><tr>' in dims
    assert '<TABLE data-totalrows="9"><tr>' in dims and dims.count("data-totalcols") == 1
    preview = AnnotateTables("firstrowpreview")({"text": text})["text"]
    # row 1 is one spanning cell, so the preview is row 2; long values are cut to 50 characters
    assert f'<table border="1"><!-- Sample row (2): Column 1: a, Column 2: {"b" * 47}... --><tr>' in preview
    assert '<TABLE data-totalrows="9"><!-- Sample row (1): Column 1: q --><tr>' in preview
    assert AnnotateTables("annotate_dims")({"text": "no tables"})["text"] == "no tables"
    with pytest.raises(ValueError, match=r"^data.steps.tables.mode: expected one of annotate_dims, firstrowpreview, "
                                         r"got 'dims'$"):
        compose("check_data", ["+data.steps.tables={_target_: olmocr.data.steps.AnnotateTables, mode: dims}"])


def test_annotate_tables_in_the_step_list():
    stem = first_page(lambda meta, text: "<table" in text)
    steps = v4_steps(drop=("tokenize",))
    steps["tables"] = {"_target_": "olmocr.data.steps.AnnotateTables", "mode": "annotate_dims", "_after_": "rules"}
    pipeline = build_pipeline(steps)
    assert list(pipeline.steps).index("tables") == list(pipeline.steps).index("rules") + 1
    target = pipeline(sample_for(stem))["target"]
    assert 'data-totalrows="' in target and target.startswith("---\n")


def test_message_order():
    text_first = BuildMessages()({"prompt": "P", "target": "T"})["messages"]
    assert [p["type"] for p in text_first[0]["content"]] == ["text", "image"]
    assert text_first[1] == {"role": "assistant", "content": "T"}
    image_first = BuildMessages(image_first=True)({"prompt": "P"})["messages"]
    assert [p["type"] for p in image_first[0]["content"]] == ["image", "text"] and len(image_first) == 1


def _production(processor, **replace):
    return build_pipeline(v4_steps(**replace), processor=processor)


def test_tokenize_masks_prompt_and_ends_with_end_of_turn(processor):
    sample = _production(processor)(sample_for(first_page(lambda m, t: m.is_table)))
    ids, labels = sample["input_ids"], sample["labels"]
    tok = processor.tokenizer
    learned = ids[labels != IGNORE_INDEX]
    assert tok.decode(learned) == sample["target"] + "<|im_end|>"
    assert learned[-1].item() == tok.convert_tokens_to_ids("<|im_end|>")
    image_pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert (labels[ids == image_pad] == IGNORE_INDEX).all()
    grid = sample["image_grid_thw"][0]
    assert (ids == image_pad).sum().item() == int(grid.prod()) // 4  # 2x2 merge
    assert sample["pixel_values"].shape[0] == int(grid.prod())
    # The prompt comes before the image, as production inference expects.
    text = tok.decode(ids)
    assert text.index(PROMPT_V4[:40]) < text.index("<|vision_start|>")


def test_tokenize_too_long_is_rejected(processor):
    pipeline = _production(processor, tokenize={"_target_": "olmocr.data.steps.Tokenize", "max_length": 50})
    with pytest.raises(Reject) as info:
        pipeline(sample_for(first_page(lambda m, t: True)))
    assert info.value.reason == "too_long" and info.value.step == "tokenize"


@pytest.mark.parametrize("token", ["<|image_pad|>", "<|im_end|>"])
def test_a_target_that_spells_a_control_token_is_rejected(processor, tmp_path, token):
    # A page about chat models may quote one; tokenized, it would be an image placeholder without an
    # image (training stops on a features/tokens mismatch) or an end of turn in mid-answer.
    import shutil

    stem = first_page(lambda m, t: True)
    shutil.copy(os.path.join(TRAIN, stem + ".pdf"), tmp_path)
    with open(os.path.join(TRAIN, stem + ".md")) as src, open(tmp_path / (stem + ".md"), "w") as dst:
        dst.write(src.read() + f"\nThe chat template closes a turn with {token}.\n")
    sample = {"md_path": str(tmp_path / (stem + ".md")), "pdf_path": str(tmp_path / (stem + ".pdf")),
              "rng": random.Random(0)}
    with pytest.raises(Reject) as info:
        _production(processor)(sample)
    assert info.value.reason == "control_token" and info.value.step == "tokenize" and token in str(info.value)


def test_random_token_flip_changes_only_target_inputs(processor):
    sample = _production(processor)(sample_for(first_page(lambda m, t: len(t) > 200)))
    flipped = RandomTokenFlip(processor, probability=0.5)(dict(sample, rng=random.Random(1)))
    changed = flipped["input_ids"] != sample["input_ids"]
    assert changed.any()
    assert (sample["labels"][changed] != IGNORE_INDEX).all()
    assert torch.equal(flipped["labels"], sample["labels"])
    special = set(processor.tokenizer.all_special_ids)
    assert not set(flipped["input_ids"][changed].tolist()) & special
    same = RandomTokenFlip(processor, probability=0.0)(dict(sample))
    assert torch.equal(same["input_ids"], sample["input_ids"])


def test_step_order_follows_config_and_after_keys(processor):
    from olmocr.data.chain import step_order

    steps = {"a": {"_target_": "olmocr.data.steps.BuildPrompt"}, "b": None,
             "c": {"_target_": "olmocr.data.steps.BuildTarget"},
             "d": {"_target_": "olmocr.data.steps.NormalizeLatex", "_after_": "a"},
             "e": {"_target_": "olmocr.data.steps.DropRotated", "_after_": "a"},
             "f": {"_target_": "olmocr.data.steps.BuildMessages", "_after_": "d"}}
    assert step_order(steps) == ["a", "d", "f", "e", "c"]
    pipeline = build_pipeline(steps)
    assert list(pipeline.steps) == ["a", "d", "f", "e", "c"]
    assert isinstance(pipeline.steps["d"], NormalizeLatex)
    with pytest.raises(ValueError, match="data.steps.x._after_: 'b' is not an enabled step"):
        step_order({**steps, "x": {"_target_": "olmocr.data.steps.DropRotated", "_after_": "b"}})
    with pytest.raises(ValueError, match="is not an enabled step"):
        step_order({"p": {"_target_": "t", "_after_": "q"}, "q": {"_target_": "t", "_after_": "p"}})


def test_processor_is_injected_only_where_asked(processor):
    pipeline = build_pipeline({"tok": {"_target_": "olmocr.data.steps.Tokenize"},
                               "prompt": {"_target_": "olmocr.data.steps.BuildPrompt"}}, processor=processor)
    assert pipeline.steps["tok"].processor is processor
    assert not hasattr(pipeline.steps["prompt"], "processor")


def test_the_blind_control_sees_a_white_page_of_the_same_size_and_learns_from_the_same_tokens(processor):
    """BlankImage after render: the image is white at the page's size, so the prompt, the image tokens and the
    labels are exactly the page's own (only the pixels differ)."""
    steps = v4_steps(longest_side=256, drop=("rules",))
    seen = build_pipeline(steps, processor=processor)(sample_for(first_page(lambda m, t: len(t) > 200)))
    blind_steps = {**steps, "blind": {"_target_": "olmocr.data.steps.BlankImage", "_after_": "render"}}
    pipeline = build_pipeline(blind_steps, processor=processor)
    assert list(pipeline.steps).index("blind") == list(pipeline.steps).index("render") + 1
    blind = pipeline(sample_for(first_page(lambda m, t: len(t) > 200)))
    assert blind["image"].size == seen["image"].size and blind["image"].getextrema() == ((255, 255),) * 3
    assert torch.equal(blind["input_ids"], seen["input_ids"]) and torch.equal(blind["labels"], seen["labels"])
    assert torch.equal(blind["image_grid_thw"], seen["image_grid_thw"])
    assert not torch.equal(blind["pixel_values"], seen["pixel_values"])


def test_a_model_carries_how_it_reads_its_pages_and_steps_take_it(tmp_path):
    """olmocr.data.presented: only what the steps name as presenting is recorded (not the checks, the
    augmentations, the targets, the render cache); a steps config takes every recorded setting unless the command
    line gives it, and one without a recorded step is refused naming it."""
    from omegaconf import OmegaConf

    from olmocr.data.presented import RECORD, as_trained, read_record, write_record

    steps = OmegaConf.to_container(compose("train", ["data.steps.render.longest_side=448"]).data.steps, resolve=True)
    write_record(str(tmp_path), steps)
    assert read_record(str(tmp_path)) == {"olmocr.data.steps.RenderPage": {"longest_side": 448},
                                          "olmocr.data.steps.BuildPrompt": {"version": "v4"},
                                          "olmocr.data.steps.BuildMessages": {"image_first": False}}
    model = ["model=qwen25_vl_7b", f"model.name_or_path={tmp_path}"]
    served = compose("pipeline", [*model, "convert.steps.prompt.version=v1"])
    done = as_trained(served, "convert.steps", "model.name_or_path", given=["convert.steps.prompt.version"])
    assert done.taken == ["convert.steps.render.longest_side=448"]
    assert done.overridden == ["convert.steps.prompt.version=v1 (trained with v4)"]
    assert (served.convert.steps.render.longest_side, served.convert.steps.prompt.version) == (448, "v1")
    # No record: a model trained elsewhere.
    elsewhere = compose("pipeline", ["model=qwen25_vl_7b", f"model.name_or_path={tmp_path / 'elsewhere'}"])
    assert as_trained(elsewhere, "convert.steps", "model.name_or_path") == type(done)()
    assert elsewhere.convert.steps.render.longest_side == 1288
    without = compose("pipeline", [*model, "~convert.steps.messages"])
    with pytest.raises(ValueError, match=r"^convert.steps: no BuildMessages step, and model.name_or_path=.* was "
                                         r"trained with one \({'image_first': False}\)"):
        as_trained(without, "convert.steps", "model.name_or_path")
    (tmp_path / RECORD).write_text("[1, 2]")
    with pytest.raises(ValueError, match=rf"^{tmp_path}/{RECORD}: not a record of the pages the model was trained on"):
        read_record(str(tmp_path))


def test_a_blocks_prompt_makes_the_target_the_pages_blocks_and_a_page_without_them_is_rejected(tmp_path):
    import json
    import shutil

    from olmocr.formats.frontmatter import parse_document, read_answer
    from olmocr.formats.prompts import PROMPT_BLOCKS
    from olmocr.formats.structure import blocks_from_record, format_blocks

    stem = first_page(lambda m, t: "<table" in t)
    blocks = build_pipeline({"front_matter": {"_target_": "olmocr.data.steps.ParseFrontMatter"},
                             "prompt": {"_target_": "olmocr.data.steps.BuildPrompt", "version": "blocks"},
                             "target": {"_target_": "olmocr.data.steps.BuildTarget"}})
    assert blocks.answer == "blocks" and BuildPrompt("v4").answer == "markdown"
    sample = blocks(sample_for(stem))
    with open(os.path.join(TRAIN, stem + ".blocks.json")) as fh:
        record = json.load(fh)
    meta, body = parse_document(sample["target"])
    assert sample["prompt"] == PROMPT_BLOCKS and body == format_blocks(blocks_from_record(record))
    # What the model is taught to write, read back, is the page's markdown and its blocks.
    reading = read_answer(sample["target"], "stop", 100, blocks.answer)
    assert reading.text == sample["text"] and reading.blocks == blocks_from_record(record) and reading.meta == meta
    assert BuildTarget()(BuildPrompt("v4")(sample_for(stem, meta=meta, text="x")))["target"].endswith("---\nx\n")

    for name, content, reason in (("bare", None, "missing_blocks"), ("broken", "{not json", "unreadable_blocks"),
                                  ("outside", json.dumps({"blocks": [{"order": 0, "label": "text", "text": "x",
                                                                      "box": [0, 0, 1200, 10]}]}), "blocks")):
        md = tmp_path / f"{name}.md"
        shutil.copy(os.path.join(TRAIN, stem + ".md"), md)
        if content is not None:
            (tmp_path / f"{name}.blocks.json").write_text(content)
        with pytest.raises(Reject) as info:
            blocks({"md_path": str(md), "pdf_path": None})
        assert info.value.reason == reason and info.value.step == "target" and str(md.parent) in info.value.detail
