"""algo.centre_projector: the projector's output centred and scaled on training pages before SFT."""

from __future__ import annotations

import os

import pytest
import torch
from PIL import Image, ImageDraw

from olmocr.config import compose
from olmocr.models.projector import centre_projector, image_features


def text_image(text: str, size=(224, 56)) -> Image.Image:
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((8, 20), text, fill="black")
    return image


def inputs(processor, images):
    out = []
    for image in images:
        x = processor.image_processor(images=[image], return_tensors="pt")
        out.append((x["pixel_values"], x["image_grid_thw"]))
    return out


def features(model, images) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([image_features(model, p, g) for p, g in images])


def test_centring_removes_what_every_token_shares_and_keeps_what_tells_them_apart(tiny, processor):
    """On a projector at random weights most of a token's feature is common to every token; centred, the mean
    over the pages is zero and a token's distance from it one, and the features are the old ones less that mean,
    times one number: nothing the tokens told apart is lost."""
    model = tiny.load_model()
    pages = inputs(processor, [text_image(t) for t in ("Mean required careful.", "xq zjv kwp", "The cat sat.")])
    before = features(model, pages)
    stats = centre_projector(model, pages)
    after = features(model, pages)
    mean = before.mean(0)
    assert stats.images == 3 and stats.tokens == len(before) and stats.scaled
    assert stats.shared == pytest.approx(float(mean.norm() / before.norm(dim=-1).mean()), rel=1e-4)
    assert stats.shared > 0.5  # the common component dominates before
    assert float(after.mean(0).norm()) < 1e-4
    assert float(after.norm(dim=-1).mean()) == pytest.approx(1.0, rel=1e-4)
    scale = 1.0 / stats.spread
    assert torch.allclose(after, (before - mean) * scale, atol=1e-4)


def test_blank_pages_are_centred_and_left_unscaled(tiny, processor):
    """The blind control's pages (every image blanked) have one feature: centred to zero, nothing to scale."""
    model = tiny.load_model()
    blank = inputs(processor, [Image.new("RGB", (224, 56), "white")] * 2)
    stats = centre_projector(model, blank)
    after = features(model, blank)
    assert not stats.scaled and float(after.abs().max()) < 1e-4
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_model_without_a_projector_or_a_recipe_that_starts_trained_is_one_line():
    with pytest.raises(ValueError, match=r"^algo.centre_projector: Linear has no visual.merger"):
        centre_projector(torch.nn.Linear(2, 2), [])
    with pytest.raises(Exception, match="algo.centre_projector: no such key in GRPOAlgoConfig"):
        compose("train", ["+experiment=grpo_tiny", "+algo.centre_projector=64"])  # GRPO starts from a trained model
    with pytest.raises(Exception, match="algo.centre_projector"):
        compose("train", ["algo.centre_projector=0"])


def test_sft_centres_the_projector_before_its_first_step_and_not_again_on_resume(tmp_path, cache_dir, tiny, caplog):
    """The run's log says on how many pages and how much the tokens shared; the saved model's projector is the
    centred one (its last bias moved); resumed, the run does not centre again."""
    from olmocr.train.__main__ import run

    overrides = ["algo.centre_projector=4", "checkpoint.interval=1", "trainer.eval_interval=null",
                 "callbacks.plots=null", "data.steps.render.longest_side=256"]
    out = str(tmp_path / "run")
    caplog.set_level("INFO", logger="olmocr.train")
    run(compose("train", [*overrides, "trainer.max_duration.value=1"]), out)
    assert caplog.text.count("projector centred on 4 training pages") == 1, caplog.text[-2000:]
    from olmocr.models.projector import projector_output

    original = projector_output(tiny.load_model()).bias.detach()
    saved = projector_output(tiny.load_model(path=os.path.join(out, "checkpoints", "step_000001", "model"))).bias.detach()
    assert float((saved - original).norm()) > 0.1 * float(original.norm())
    caplog.clear()
    run(compose("train", [*overrides, "trainer.max_duration.value=2"]), out)
    assert "resumed from" in caplog.text and "projector centred" not in caplog.text
