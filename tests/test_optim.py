import copy
import math

import pytest
import torch
from torch import nn

from olmocr.train import schedules
from olmocr.train.muon import SingleDeviceMuonWithAuxAdam, muon_param_groups, orthogonalize
from olmocr.train.optim import muon
from olmocr.train.optim import adamw


def test_orthogonalize_gives_near_unit_singular_values():
    torch.manual_seed(0)
    for shape in [(64, 32), (32, 64), (48, 48)]:
        g = torch.randn(*shape)
        out = orthogonalize(g).float()
        s = torch.linalg.svdvals(out)
        # Quintic Newton–Schulz pushes singular values into roughly [0.7, 1.2], not exactly 1.
        assert s.min() > 0.5 and s.max() < 1.3, (shape, s.min(), s.max())
        u, _, vh = torch.linalg.svd(g, full_matrices=False)
        assert torch.nn.functional.cosine_similarity((u @ vh).flatten(), out.flatten(), dim=0) > 0.9


def test_orthogonalize_compresses_an_ill_conditioned_spectrum():
    torch.manual_seed(0)
    g = torch.randn(64, 32) @ torch.diag(torch.logspace(-2, 1, 32))  # condition number ~1000
    s = torch.linalg.svdvals(orthogonalize(g).float())
    assert s.max() / s.min() < 10
    assert ((s > 0.6) & (s < 1.25)).float().mean() > 0.8


def test_orthogonalize_keeps_shape_and_dtype():
    g = torch.randn(10, 30, dtype=torch.float32)
    out = orthogonalize(g)
    assert out.shape == g.shape and out.dtype == torch.float32


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.hidden = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.conv = nn.Conv2d(1, 2, 3)
        self.head = nn.Linear(16, 20, bias=False)

    def get_output_embeddings(self):
        return self.head

    def forward(self, ids):
        x = self.norm(self.hidden(self.embed(ids)))
        return self.head(x).sum() + self.conv(torch.ones(1, 1, 4, 4)).sum()


def test_param_grouping():
    model = Tiny()
    groups = muon_param_groups(model)
    assert groups["muon"] == [model.hidden.weight]
    assert groups["embeddings"] == [model.embed.weight]
    assert groups["head"] == [model.head.weight]
    assert set(map(id, groups["scalars"])) == {id(p) for p in (model.hidden.bias, model.norm.weight, model.norm.bias,
                                                                model.conv.bias)}
    assert groups["other"] == [model.conv.weight]


def test_muon_updates_each_group_with_its_rule_and_lr():
    torch.manual_seed(0)
    model = Tiny()
    opt = muon(model, lr=0.02, adam_lr=1e-3)
    lrs = {g["name"]: g["lr"] for g in opt.param_groups}
    assert lrs == {"muon": 0.02, "head": 1e-3 * 11, "embeddings": 1e-3 * 30, "scalars": 1e-3 * 2, "other": 1e-3}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(torch.tensor([1, 2, 3])).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    # Muon: first step moves the weight by lr * NS(grad) * sqrt(max(1, rows/cols)), rows=16, cols=8.
    expected = before["hidden.weight"] - 0.02 * orthogonalize(grads["hidden.weight"] * 0.05 +
                                                              0.95 * grads["hidden.weight"] * 0.05) * math.sqrt(2)
    assert torch.allclose(model.hidden.weight, expected, atol=1e-6)
    # Adam: the first bias-corrected step is lr * sign(grad) (|m/sqrt(v)| = 1).
    delta = model.embed.weight - before["embed.weight"]
    touched = grads["embed.weight"].abs() > 0
    assert torch.allclose(delta[touched], -0.03 * grads["embed.weight"][touched].sign(), atol=1e-6)
    assert torch.equal(delta[~touched], torch.zeros_like(delta[~touched]))
    assert torch.allclose(model.head.weight - before["head.weight"], -0.011 * grads["head.weight"].sign(), atol=1e-6)


def test_muon_state_dict_round_trip():
    torch.manual_seed(0)
    a, b = Tiny(), Tiny()
    b.load_state_dict(a.state_dict())
    opt_a, opt_b = muon(a), muon(b)
    for _ in range(3):
        opt_a.zero_grad()
        a(torch.tensor([1, 2])).backward()
        opt_a.step()
    b.load_state_dict(a.state_dict())
    # A saved checkpoint holds copies; state_dict() alone would share a's buffers with b.
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))
    for model, opt in ((a, opt_a), (b, opt_b)):
        opt.zero_grad()
        model(torch.tensor([4, 5])).backward()
        opt.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_muon_refuses_lora():
    model = Tiny()
    model.register_parameter("lora_A", nn.Parameter(torch.zeros(2, 8)))
    with pytest.raises(ValueError, match="does not support LoRA"):
        muon(model)
    with pytest.raises(ValueError, match="use_muon"):
        SingleDeviceMuonWithAuxAdam([{"params": list(Tiny().parameters())}])


def test_adamw_does_not_decay_norms_biases_embeddings():
    model = Tiny()
    opt = adamw(model, lr=1e-3, weight_decay=0.1)
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert decayed == {id(model.hidden.weight), id(model.head.weight), id(model.conv.weight)}


@pytest.mark.parametrize("name, kwargs", [
    ("linear", {"warmup": 0.1}), ("cosine", {"warmup": 10}), ("constant", {"warmup": 5}),
    ("wsd", {"warmup": 0.1, "decay": 0.2}), ("inverse_sqrt", {"warmup": 10}),
])
def test_schedules_warm_up_then_follow_their_shape(name, kwargs):
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = getattr(schedules, name)(opt, total_steps=100, **kwargs)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    warm = 10 if name != "constant" else 5
    assert lrs[0] == pytest.approx(1 / warm)
    assert all(a < b for a, b in zip(lrs[:warm - 1], lrs[1:warm]))
    assert lrs[warm - 1] == pytest.approx(1.0)
    if name in ("linear", "cosine"):
        assert lrs[-1] < 0.05 and all(a >= b for a, b in zip(lrs[warm:], lrs[warm + 1:]))
    if name == "constant":
        assert set(lrs[warm:]) == {1.0}
    if name == "wsd":
        assert set(lrs[10:80]) == {1.0} and lrs[-1] < 0.1
    if name == "inverse_sqrt":
        assert lrs[39] == pytest.approx(math.sqrt(10 / 40))


def test_schedule_errors_are_clear():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="exceed the run"):
        schedules.wsd(opt, total_steps=10, warmup=5, decay=8)


def test_sampler_is_seeded_resumable_and_even_across_ranks():
    from olmocr.train.data import ResumableSampler

    full = list(ResumableSampler(10, seed=1, epoch=0))
    assert sorted(full) == list(range(10)) and full != list(range(10))
    assert list(ResumableSampler(10, seed=1, epoch=1)) != full
    assert list(ResumableSampler(10, seed=1, epoch=0, position=4)) == full[4:]
    ranks = [list(ResumableSampler(7, seed=1, epoch=0, rank=r, world_size=2)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(ResumableSampler(7, seed=1, epoch=0, rank=1, world_size=2)) == 4
    assert set(ranks[0]) | set(ranks[1]) == set(range(7))
