"""A tiny model of a real architecture, built locally (random weights, locally trained tokenizer).

It is the embedded default: the data, training and inference code paths run on it exactly as on a
7B checkpoint, with nothing downloaded. Built once per configuration and cached on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Annotated

from olmocr.config import OneOf, Range
from olmocr.errors import UserError
from olmocr.models.families import transformers_class
from olmocr.models.source import Attention, Dtype, FamilyName, ModelSource

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TOKENIZERS = ("words", "letters", "blocks")  # what the tokenizer's merges are learnt from (train_tokenizer)

# Bump when the builder changes what it writes, so stale caches are rebuilt rather than reused.
BUILDER_VERSION = 3  # 3: the letters tokenizer learns the brief prompt too


class TinyModel(ModelSource):
    def __init__(self, family: FamilyName = "qwen2_5_vl", hidden_size: int = 64, num_layers: int = 2,
                 num_heads: int = 2, num_kv_heads: int = 1, intermediate_size: int = 128,
                 vision_depth: int = 2, vision_hidden_size: int = 64, vision_heads: int = 4,
                 vocab_size: int = 1024, seed: int = 0, cache_dir: str = "~/.cache/olmocr/models",
                 dtype: Dtype = "float32", attn_implementation: Attention = "sdpa",
                 image_min_pixels: int | None = 56 * 56, image_max_pixels: int | None = 256 * 256,
                 rope_theta: Annotated[float, Range(above=0)] = 10000.0,
                 tokenizer: Annotated[str, OneOf(*TOKENIZERS)] = "words"):
        super().__init__(family, dtype, attn_implementation, image_min_pixels, image_max_pixels)
        head_dim = hidden_size // num_heads
        if hidden_size % num_heads or head_dim % 2:
            raise UserError(f"model.hidden_size {hidden_size} must split into {num_heads} heads of even size")
        self.arch = {
            "family": family, "hidden_size": hidden_size, "num_layers": num_layers, "num_heads": num_heads,
            "num_kv_heads": num_kv_heads, "intermediate_size": intermediate_size,
            "vision_depth": vision_depth, "vision_hidden_size": vision_hidden_size,
            "vision_heads": vision_heads, "vocab_size": vocab_size, "seed": seed,
            "image_min_pixels": image_min_pixels, "image_max_pixels": image_max_pixels,
            "builder": BUILDER_VERSION,
        }
        if rope_theta != 10000.0 or tokenizer != "words":  # the tiny model's cache key as before these existed
            self.arch.update(rope_theta=rope_theta, tokenizer=tokenizer)
        key = hashlib.sha256(json.dumps(self.arch, sort_keys=True).encode()).hexdigest()[:12]
        self.cache_path = os.path.join(os.path.expanduser(cache_dir), f"tiny-{family}-{key}")

    @property
    def path(self) -> str:
        if not os.path.exists(os.path.join(self.cache_path, "config.json")):
            build_tiny(self.arch, self.family, self.cache_path)
        return self.cache_path


def _mrope_section(head_dim: int) -> list[int]:
    half = head_dim // 2
    temporal = half - 2 * (half * 3 // 8)
    return [temporal, half * 3 // 8, half * 3 // 8]


def train_tokenizer(vocab_size: int, corpus: str = "words"):
    """``words``: byte-level BPE over the synthetic word banks and markup, a word of the banks mostly one token.
    ``letters``: the same over the prompts and markup alone, so the text of a page is spelled in letters and
    short pieces: what a model that learns to read writes one or two characters of the image at a time, and
    a word it never saw is spelled from pieces it knows. ``blocks``: ``letters`` with the blocks prompts and markup
    (:func:`olmocr.synth.text.structure_lines`), for a model that writes a page as blocks with boxes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from olmocr.synth.text import corpus_lines, instruction_lines, structure_lines

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator({"words": corpus_lines, "letters": instruction_lines, "blocks": structure_lines}[corpus](), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:], chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False, model_max_length=32768,
    )


def build_processor(arch: dict, family, tokenizer):
    from transformers import Qwen2VLImageProcessor

    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": arch["image_min_pixels"], "longest_edge": arch["image_max_pixels"]},
        patch_size=family.patch_size, merge_size=2, temporal_patch_size=2,
        image_mean=list(family.image_mean), image_std=list(family.image_std),
    )
    video_processor = transformers_class(family.video_processor_class)(
        patch_size=family.patch_size, merge_size=2, temporal_patch_size=2,
        image_mean=list(family.image_mean), image_std=list(family.image_std),
    )
    return transformers_class(family.processor_class)(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


def build_config(arch: dict, family, tokenizer):
    ids = {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"),
    ]}
    head_dim = arch["hidden_size"] // arch["num_heads"]
    text = {
        "vocab_size": len(tokenizer), "hidden_size": arch["hidden_size"],
        "intermediate_size": arch["intermediate_size"], "num_hidden_layers": arch["num_layers"],
        "num_attention_heads": arch["num_heads"], "num_key_value_heads": arch["num_kv_heads"],
        "max_position_embeddings": 32768, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": arch.get("rope_theta", 10000.0),
                            "mrope_section": _mrope_section(head_dim)},
        "bos_token_id": None, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
    }
    vision = {
        "depth": arch["vision_depth"], "hidden_size": arch["vision_hidden_size"],
        "num_heads": arch["vision_heads"], "patch_size": family.patch_size, "spatial_merge_size": 2,
        "temporal_patch_size": 2, "out_hidden_size": arch["hidden_size"],
    }
    if family.name == "qwen2_vl":
        vision = {"depth": arch["vision_depth"], "embed_dim": arch["vision_hidden_size"],
                  "num_heads": arch["vision_heads"], "patch_size": family.patch_size,
                  "spatial_merge_size": 2, "temporal_patch_size": 2, "hidden_size": arch["hidden_size"],
                  "mlp_ratio": 2}
    elif family.name == "qwen2_5_vl":
        vision.update(intermediate_size=2 * arch["vision_hidden_size"], fullatt_block_indexes=[arch["vision_depth"] - 1],
                      window_size=112)
    else:
        text["head_dim"] = head_dim
        vision.update(intermediate_size=2 * arch["vision_hidden_size"], num_position_embeddings=256,
                      deepstack_visual_indexes=[0])
    config_cls = transformers_class(family.config_class)
    return config_cls(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)


def build_tiny(arch: dict, family, destination: str) -> None:
    """Build into a staging dir and rename it into place, under a lock so concurrent processes (the
    ranks of a torchrun job) build once and the others wait for the result."""
    import fcntl

    import torch

    os.makedirs(os.path.dirname(destination), exist_ok=True)
    with open(destination + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(destination, "config.json")):
            return
        tokenizer = train_tokenizer(arch["vocab_size"], arch.get("tokenizer", "words"))
        processor = build_processor(arch, family, tokenizer)
        config = build_config(arch, family, tokenizer)
        torch.manual_seed(arch["seed"])
        model = transformers_class(family.model_class)(config)
        # Sampling by default, as released chat models' generation configs say: a server's temperature
        # then means something (transformers serve keeps the model's do_sample); greedy is asked for.
        model.generation_config.do_sample = True
        staging = tempfile.mkdtemp(prefix=".building-", dir=os.path.dirname(destination))
        try:
            model.save_pretrained(staging)
            processor.save_pretrained(staging)
            model.generation_config.save_pretrained(staging)
            shutil.rmtree(destination, ignore_errors=True)  # a partial dir left by a killed build
            os.rename(staging, destination)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
