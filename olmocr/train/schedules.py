"""Learning-rate schedules, all with linear warm-up, as multipliers of each group's base lr.

``warmup`` is a number of steps (>= 1) or a fraction of the run (< 1). Every schedule is a plain
function of the step, so resuming needs only the step count.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated

from olmocr.config import Range, runtime
from olmocr.errors import UserError

if TYPE_CHECKING:
    from torch.optim.lr_scheduler import LambdaLR


def _lambda_lr(optimizer, factor) -> LambdaLR:
    from torch.optim.lr_scheduler import LambdaLR  # imported here: reading the builders needs no torch

    return LambdaLR(optimizer, factor)


# A phase's length: steps (>= 1) or a fraction of the run (< 1)
Phase = Annotated[float, Range(at_least=0)]
# The learning rate at the end, as a share of the base
FinalRatio = Annotated[float, Range(at_least=0, at_most=1)]


def _warmup_steps(value: float, total_steps: int) -> int:
    """Steps of a phase given as steps (>= 1) or a fraction of the run (< 1)."""
    return int(round(value * total_steps)) if value < 1 else int(value)


def _warmup(step: int, warmup_steps: int) -> float | None:
    return (step + 1) / warmup_steps if step < warmup_steps else None


def _decaying(optimizer, total_steps: int, warmup: float, shape) -> LambdaLR:
    """Warm-up, then ``shape(progress)`` with progress going from 0 to 1 over the remaining steps."""
    w = _warmup_steps(warmup, total_steps)

    def factor(step: int) -> float:
        up = _warmup(step, w)
        return up if up is not None else shape(min(1.0, (step - w) / max(1, total_steps - w)))

    return _lambda_lr(optimizer, factor)


@runtime("optimizer", "total_steps")
def linear(optimizer, total_steps: int, warmup: Phase = 0.1, final_ratio: FinalRatio = 0.0) -> LambdaLR:
    return _decaying(optimizer, total_steps, warmup, lambda p: 1.0 - (1.0 - final_ratio) * p)


@runtime("optimizer", "total_steps")
def cosine(optimizer, total_steps: int, warmup: Phase = 0.1, final_ratio: FinalRatio = 0.0) -> LambdaLR:
    return _decaying(optimizer, total_steps, warmup,
                     lambda p: final_ratio + (1.0 - final_ratio) * 0.5 * (1.0 + math.cos(math.pi * p)))


@runtime("optimizer", "total_steps")
def constant(optimizer, total_steps: int, warmup: Phase = 0.0) -> LambdaLR:
    w = _warmup_steps(warmup, total_steps)
    return _lambda_lr(optimizer, lambda step: _warmup(step, w) or 1.0)


@runtime("optimizer", "total_steps")
def wsd(optimizer, total_steps: int, warmup: Phase = 0.05, decay: Phase = 0.2,
        final_ratio: FinalRatio = 0.0) -> LambdaLR:
    """Warm-up, stable, then linear decay over the last ``decay`` (steps, or fraction of the run)."""
    w = _warmup_steps(warmup, total_steps)
    d = _warmup_steps(decay, total_steps)
    if w + d > total_steps:
        raise UserError(f"scheduler: warm-up ({w}) and decay ({d}) steps exceed the run ({total_steps} steps)")

    def factor(step: int) -> float:
        up = _warmup(step, w)
        if up is not None:
            return up
        into_decay = step - (total_steps - d)
        if into_decay < 0:
            return 1.0
        return 1.0 - (1.0 - final_ratio) * min(1.0, into_decay / max(1, d))

    return _lambda_lr(optimizer, factor)


@runtime("optimizer", "total_steps")
def inverse_sqrt(optimizer, total_steps: int, warmup: Phase = 0.05) -> LambdaLR:
    w = max(1, _warmup_steps(warmup, total_steps))
    return _lambda_lr(optimizer, lambda step: _warmup(step, w) or math.sqrt(w / (step + 1)))
