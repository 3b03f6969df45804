"""The model families the project trains, chosen by config (never by a substring of a hub name)."""

from __future__ import annotations

from dataclasses import dataclass

from olmocr.errors import UserError


@dataclass(frozen=True)
class Family:
    name: str
    config_class: str
    model_class: str
    processor_class: str
    video_processor_class: str
    patch_size: int
    # Qwen3-VL normalises pixels to [-1, 1]; Qwen2-VL and Qwen2.5-VL use CLIP statistics.
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]


_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

FAMILIES = {
    "qwen2_vl": Family("qwen2_vl", "Qwen2VLConfig", "Qwen2VLForConditionalGeneration", "Qwen2VLProcessor",
                       "Qwen2VLVideoProcessor", 14, _CLIP_MEAN, _CLIP_STD),
    "qwen2_5_vl": Family("qwen2_5_vl", "Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration",
                         "Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor", 14, _CLIP_MEAN, _CLIP_STD),
    "qwen3_vl": Family("qwen3_vl", "Qwen3VLConfig", "Qwen3VLForConditionalGeneration", "Qwen3VLProcessor",
                       "Qwen3VLVideoProcessor", 16, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
}


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise UserError(f"model.family: unknown family {name!r} (expected one of {', '.join(FAMILIES)})")
    return FAMILIES[name]


def transformers_class(name: str):
    import transformers

    return getattr(transformers, name)
