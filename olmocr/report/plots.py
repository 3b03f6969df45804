"""python -m olmocr.report.plots run_dir=… — a training run's curves as PNG files, for people without wandb.

Reads ``<run dir>/metrics.jsonl`` (SFT or GRPO) and writes ``<run dir>/plots/<panel>.png``: loss with
the eval losses, learning rate, gradient norm, tokens/s; the held-out bench eval's overall and per-category
scores, pages parsed, pass rates per test type and output length; for GRPO also the mean of every reward,
the rollouts' bench pass rates per test type, KL and completion length; for DPO the reward margin and accuracy. Panels with no data are not drawn. Each PNG carries
the series it shows (x and y of every line, read back from the figure) in its ``olmocr:series`` text
chunk. Training writes them at the end of every run; this command draws them for any run dir, at any
time (a run still going included).
"""

from __future__ import annotations

import fnmatch
import json
import os

from omegaconf import DictConfig

import olmocr.report.schema  # noqa: F401 - puts this stage's schema in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.errors import UserError
from olmocr.utils.jsonl import read_rows

# (file name, title, y label, metric patterns; fnmatch over "kind:key", kind train or eval)
PANELS = [
    ("loss", "Loss", "loss", ["train:train/loss", "eval:eval/*loss"]),
    ("lr", "Learning rate", "lr", ["train:train/lr"]),
    ("grad_norm", "Gradient norm", "norm", ["train:train/grad_norm"]),
    ("tokens_per_s", "Throughput", "tokens/s", ["train:perf/tokens_per_s"]),
    ("rewards", "Rewards (mean per step)", "reward", ["train:train/rewards/*/mean", "train:train/reward"]),
    ("completion_length", "Completion length", "tokens", ["train:train/completions/mean_length",
                                                          "eval:eval/bench/output_tokens"]),
    ("bench_eval", "Held-out bench: overall, per category, pages parsed", "share",
     ["eval:eval/bench/overall", "eval:eval/bench/overall_score", "eval:eval/bench/category/*",
      "eval:eval/bench/parsed"]),
    # what is left of eval/bench/*: the held-out eval's type/<type>, GRPO's reward eval's <type>
    ("bench", "Bench pass rate per test type", "pass rate", ["train:train/bench/*", "eval:eval/bench/*"]),
    ("kl", "KL to the reference", "KL", ["train:train/kl"]),
    ("preference", "DPO: reward margin and accuracy", "value",
     ["train:train/rewards/margins", "train:train/rewards/accuracies", "eval:eval/rewards/margins",
      "eval:eval/rewards/accuracies"]),
]


def read_metrics(path: str) -> list[dict]:
    """The rows of a metrics file; a torn last line (a run killed mid-write) is skipped."""
    return read_rows(path)


def panel_series(rows: list[dict]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """Per panel, per metric: (steps, values). A step logged twice (a resumed run) keeps its last value."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for row in rows:
        kind, step = row.get("kind", "train"), row.get("step")
        if not isinstance(step, int):
            continue
        for key, value in row.items():
            if key in ("kind", "step") or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            for name, _, _, patterns in PANELS:
                if any(fnmatch.fnmatchcase(f"{kind}:{key}", p) for p in patterns):
                    out.setdefault(name, {}).setdefault(key, {})[step] = float(value)
                    break
    return {name: {key: (sorted(points), [points[s] for s in sorted(points)]) for key, points in sorted(lines.items())}
            for name, lines in out.items()}


def plot_run(run_dir: str, dpi: int = 100) -> list[str]:
    """Draw every panel with data; returns the PNG paths."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        raise UserError(f"run_dir: {run_dir} has no metrics.jsonl (is it a training run dir?)")
    series = panel_series(read_metrics(path))
    folder = os.path.join(run_dir, "plots")
    os.makedirs(folder, exist_ok=True)
    written = []
    for name, title, ylabel, _ in PANELS:
        if name not in series:
            continue
        figure = Figure(figsize=(7, 4), dpi=dpi)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        for key, (steps, values) in series[name].items():
            axes.plot(steps, values, marker="." if len(steps) < 30 else None, label=key)
        axes.set(title=title, xlabel="step", ylabel=ylabel)
        axes.grid(alpha=0.3)
        if len(series[name]) > 1:
            axes.legend(fontsize=8)
        if name == "lr":
            axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        figure.tight_layout()
        # What the figure draws, read back from its lines: users and tests get the data, not pixels.
        drawn = {line.get_label(): [[float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()]]
                 for line in axes.get_lines()}
        out = os.path.join(folder, f"{name}.png")
        figure.savefig(out, metadata={"olmocr:series": json.dumps(drawn)})
        written.append(out)
    return written


@stage("report_plots")
def run(cfg: DictConfig, output_dir: str | None = None) -> list[str]:
    written = plot_run(cfg.run_dir, cfg.dpi)
    print("\n".join(written) if written else f"{cfg.run_dir}: no metrics to plot yet")
    return written


if __name__ == "__main__":
    run.main()
