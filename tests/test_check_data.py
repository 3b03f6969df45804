"""python -m olmocr.data end to end, as a real subprocess with real Hydra."""

import glob
import json
import os
import subprocess

from test_index import EXPECTED_BAD, messy  # noqa: F401  (fixture)


def run_stage(python, args, cwd, env_cache):
    env = dict(os.environ, OLMOCR_CACHE=env_cache)
    return subprocess.run([python, "-m", "olmocr.data", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def test_default_config_loads_every_bundled_page(tmp_path, cache_dir, warm_python):
    proc = run_stage(warm_python, [], tmp_path, cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = glob.glob(str(tmp_path / "outputs" / "check_data" / "*"))
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["loaded"] == summary["samples"] == 32 and summary["rejected"] == {}
    assert summary["sources"]["train/synth"]["languages"]["no"] >= 1
    assert summary["tokens"] > 32 * 100
    info = json.load(open(os.path.join(run_dir, "run_info.json")))
    assert info["packages"]["transformers"] == "5.17.0" and "commit" in info["git"]
    assert os.path.exists(os.path.join(run_dir, ".hydra", "config.yaml"))


def test_messy_folder_is_reported_not_fatal(messy, tmp_path, cache_dir, warm_python):  # noqa: F811
    proc = run_stage(warm_python, ["~data.train.synth", f"+data.train.messy={{roots: ['{messy}']}}",
                                   "~data.eval.synth", "num_workers=2"], tmp_path, cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = glob.glob(str(tmp_path / "outputs" / "check_data" / "*"))
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["loaded"] == 3
    bad = {**EXPECTED_BAD, "pdf_only": "missing_md"}  # a PDF without its .md is named too
    assert summary["rejected"] == {reason: 1 for reason in bad.values()}
    lines = [json.loads(line) for line in open(os.path.join(run_dir, "rejected.jsonl"))]
    assert {os.path.splitext(os.path.basename(line["md"] or line["pdf"]))[0]: line["reason"] for line in lines} == bad
    assert "rejected by reason" in proc.stdout + proc.stderr
