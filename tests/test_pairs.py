"""Preference pairs mined from a model's samples: ranked by the reward functions against a scripted chat
server (known answers), and from the real tiny model behind transformers serve, resumed."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess

import pytest
from chat_server import SERVER_ERROR, ChatServer, answer, good
from conftest import SAMPLE
from omegaconf import OmegaConf

from olmocr.config import CONF_DIR, PROJECT_ROOT, compose
from olmocr.faults import Unreachable
from olmocr.rewards import build_rewards

BENCH = os.path.join(SAMPLE, "eval")


def rewards_of(texts: list[str], page_tests: str, reference: str | None, finish: list[str]) -> list[float]:
    funcs, weights = build_rewards(OmegaConf.to_container(OmegaConf.load(os.path.join(CONF_DIR, "rewards", "olmocr2.yaml"))))
    columns = {"tests": [page_tests] * len(texts), "reference": [reference] * len(texts), "finish_reason": finish}
    values = [fn(texts, **columns) for fn in funcs]
    return [sum(w * v[i] for w, v in zip(weights, values) if v[i] is not None) for i in range(len(texts))]


def one_page_bench(tmp_path) -> str:
    """The first bundled eval page, with its tests and its reference .md."""
    root = tmp_path / "bench"
    os.makedirs(root / "pdfs")
    for ext in ("pdf", "md"):
        shutil.copy(os.path.join(BENCH, "pdfs", f"synth_s0_01000.{ext}"), root / "pdfs")
    with open(os.path.join(BENCH, "synth.jsonl")) as src, open(root / "synth.jsonl", "w") as dst:
        dst.writelines(line for line in src if '"synth_s0_01000.pdf"' in line)
    return str(root)


def mine(tmp_path, server: ChatServer, bench_dir: str, *extra: str) -> dict:
    from olmocr.pairs.__main__ import run

    overrides = [f"bench_dir={bench_dir}", "server=external", f"server.url={server.url}", "server.model_name=m",
                 "convert.steps.render.longest_side=200", "progress=false", *extra]
    return run(compose("pairs", overrides), str(tmp_path / "run"))


def test_the_best_and_the_worst_sample_make_the_pair(tmp_path):
    bench_dir = one_page_bench(tmp_path)
    reference = open(os.path.join(bench_dir, "pdfs", "synth_s0_01000.md")).read()
    # The reference itself passes the tests and stops; an unparseable cut-off answer scores least.
    worst = answer("Der Andere", finish_reason="length")
    script = itertools.cycle([good("Der Andere Ist"), answer(reference), worst, SERVER_ERROR])
    with ChatServer(script=lambda request: next(script)) as server:
        summary = mine(tmp_path, server, bench_dir, "samples=4", "temperature=0.7")
    assert {r.temperature for r in server.requests} == {0.7} and len(server.requests) == 4
    [row] = [json.loads(line) for line in open(summary["pairs_file"])]
    assert row["chosen"] == reference and row["rejected"] == "Der Andere"
    from olmocr.data.bench_prompts import bench_pages

    [page], _ = bench_pages(bench_dir)
    expected = rewards_of([reference, "Der Andere"], page["tests"], reference, ["stop", "length"])
    assert (row["chosen_reward"], row["rejected_reward"]) == pytest.approx(expected)
    # The four answers arrive in any order; the failed one is kept with its error and no reward.
    [failed] = [s for s in row["samples"] if s["error"] is not None]
    assert failed["reward"] is None and failed["error"].startswith("HTTP 500")
    assert summary == {**summary, "pairs": 1, "pages_without_pair": 0, "mined_now": 1}


def test_samples_within_the_margin_give_no_pair_and_a_rerun_skips_mined_pages(tmp_path):
    bench_dir = one_page_bench(tmp_path)
    with ChatServer([good("Same answer")]) as server:
        summary = mine(tmp_path, server, bench_dir, "samples=3")
        assert summary["pairs"] == 0 and summary["pages_without_pair"] == 1
        [row] = [json.loads(line) for line in open(summary["pairs_file"])]
        assert row["chosen"] is None and row["why"] == "rewards within the margin"
        again = mine(tmp_path, server, bench_dir, "samples=3")
        assert again["mined_now"] == 0 and len(server.requests) == 3  # nothing sent the second time
        with open(summary["pairs_file"], "r+") as fh:  # killed as it wrote the page's line: the line is torn
            fh.truncate(25)
        torn = mine(tmp_path, server, bench_dir, "samples=3")
    assert torn["mined_now"] == 1 and len(server.requests) == 6  # mined again, its line on a line of its own
    assert [json.loads(line) for line in open(summary["pairs_file"])] == [row]
    with pytest.raises(ValueError, match="samples: a pair needs at least 2"):
        mine(tmp_path, server, bench_dir, "samples=1")


def test_a_page_the_server_answered_no_sample_of_is_not_recorded_when_the_server_stopped_answering(tmp_path):
    """A re-run skips the pages in pairs.jsonl: a page recorded as 'fewer than 2 answers' because the server
    answered none of its samples would never be mined once the server is mended."""
    bench_dir = one_page_bench(tmp_path)
    with ChatServer([SERVER_ERROR]) as server:
        with pytest.raises(Unreachable, match=r"^the server at \S+ answered no request for all 1 pages \(model m\): "
                                             r"HTTP 500: .*; they are not recorded \(pages mined so far are kept"):
            mine(tmp_path, server, bench_dir, "samples=2")
    assert not os.path.exists(tmp_path / "run" / "pairs.jsonl") or not open(tmp_path / "run" / "pairs.jsonl").read()
    with ChatServer([good("Same answer")]) as server:
        assert mine(tmp_path, server, bench_dir, "samples=2")["mined_now"] == 1


@pytest.mark.integration
def test_pairs_from_the_tiny_model_keep_the_margin_and_resume(tmp_path, tiny, warm_python):
    run_dir = tmp_path / "pairs"
    command = [warm_python, "-m", "olmocr.pairs", f"bench_dir={BENCH}", f"model.cache_dir={os.path.dirname(tiny.path)}",
               "samples=4", "margin=0.2", "convert.max_tokens=48", "convert.concurrency=1", "progress=false",
               f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": PROJECT_ROOT})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in open(run_dir / "pairs.jsonl")]
    assert len(rows) == 8
    pairs = [r for r in rows if r["chosen"] is not None]
    assert pairs, "the sampling tiny model gives some pages two answers that differ by the margin"
    for row in pairs:
        assert row["chosen_reward"] >= row["rejected_reward"] + 0.2
        rewards = [s["reward"] for s in row["samples"]]
        assert row["chosen_reward"] == max(rewards) and row["rejected_reward"] == min(rewards)
    for row in rows:
        if row["chosen"] is None:
            rewards = [s["reward"] for s in row["samples"]]
            assert max(rewards) - min(rewards) < 0.2
    before = (run_dir / "pairs.jsonl").read_text()
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": PROJECT_ROOT})
    assert proc.returncode == 0 and "0 to mine, 8 already in" in proc.stdout + proc.stderr
    assert (run_dir / "pairs.jsonl").read_text() == before
    assert not (run_dir / "server.log").read_text().count("$ ") > 1  # no server started the second time
    # transformers serve leaves sampled control tokens in its answers; the client drops them as vLLM does,
    # so the mined pairs train (an <|image_pad|> in an answer would stop DPO on a tokens/features mismatch).
    special = tiny.load_processor().tokenizer.all_special_tokens
    texts = [row[side] for row in pairs for side in ("chosen", "rejected")]
    assert texts and not [t for t in texts if any(token in t for token in special)]
    from olmocr.train.__main__ import run

    result = run(compose("train", ["+experiment=dpo_tiny", f"model.cache_dir={os.path.dirname(tiny.path)}",
                                   f"data.train=[{run_dir / 'pairs.jsonl'}]", "trainer.max_duration.value=2",
                                   "trainer.eval_interval=null", "checkpoint.keep_best=null", "callbacks.plots=null"]),
                 str(tmp_path / "dpo"))
    assert result["state"]["step"] == 2
