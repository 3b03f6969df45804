"""What a stage trains of a loaded model: everything, the language model or vision tower alone, or LoRA
adapters on the language model's attention projections."""

from __future__ import annotations

from torch import nn

from olmocr.errors import UserError

VISION_PREFIX = "model.visual."
LANGUAGE_PREFIXES = ("model.language_model.", "lm_head.")


def freeze(model: nn.Module, vision: bool = False, language: bool = False) -> None:
    for name, param in model.named_parameters():
        if (vision and name.startswith(VISION_PREFIX)) or (language and name.startswith(LANGUAGE_PREFIXES)):
            param.requires_grad_(False)


def lora_target_regex(modules: list[str]) -> str:
    # Vision blocks have gate/up/down_proj too: the regex keeps adapters on the language model only.
    return r"model\.language_model\..*\.(" + "|".join(modules) + r")"


def apply_lora(model: nn.Module, r: int = 8, alpha: int = 32, dropout: float = 0.1,
               target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, bias="none",
                        target_modules=lora_target_regex(list(target_modules)))
    return get_peft_model(model, config)


def trainable_summary(model: nn.Module) -> tuple[int, int]:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, total


def load_trainable(source, device="cpu", freeze_vision: bool = False, freeze_language: bool = False,
                   lora: dict | None = None, checkpoint: str | None = None):
    """Load ``source`` for training: full, partly frozen, or with LoRA adapters. ``checkpoint`` is a saved
    model directory (full weights, or an adapter over ``source``) to continue from."""
    if lora is None:
        model = source.load_model(device, path=checkpoint)
        freeze(model, vision=freeze_vision, language=freeze_language)
        return model
    model = source.load_model(device)
    if checkpoint is None:
        return apply_lora(model, **lora)
    from peft import PeftModel

    return PeftModel.from_pretrained(model, checkpoint, is_trainable=True)


def compile_blocks(model, backend: str = "inductor") -> int:
    """``torch.compile`` every repeated block in place: the classes the model lists in ``_no_split_modules``
    (its decoder layers, and its vision blocks under flash attention). Blocks of one class share one compiled
    graph, so compiling takes about as long for 28 layers as for one, and the glue around them (embeddings,
    rotary positions, the output wrappers of transformers) stays eager, where compiling the whole model breaks
    its graph again and again. Shape-generic from the start: pages are not padded to one length, so the
    second batch would compile every block again (dynamo's first compile is for the first batch's shapes
    only). ``backend``: torch.compile's. Returns how many blocks were compiled."""
    from transformers.utils.generic import is_flash_attention_requested

    names = set()
    for module in model.modules():
        names |= set(getattr(module, "_no_split_modules", None) or [])
    # Outside flash attention, the vision tower (``visual`` in the Qwen-VL families) splits its packed windows
    # with a data-dependent ``.tolist()`` and attends to them one by one in a Python loop: each vision block
    # breaks its graph there and compiles again for every count of windows a page size gives, up to dynamo's
    # recompile limit. Those blocks stay eager (two steps of the tiny model: 22 s of CPU instead of 55 s).
    eager = set()
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] == "visual" and not is_flash_attention_requested(module.config):
            eager |= {id(m) for m in module.modules()}
    blocks = [m for m in model.modules() if type(m).__name__ in names and id(m) not in eager]
    if not blocks:
        raise UserError(f"trainer.compile: {type(model).__name__} lists no repeated blocks (_no_split_modules)")
    for block in blocks:
        block.compile(dynamic=True, backend=backend)
    return len(blocks)
