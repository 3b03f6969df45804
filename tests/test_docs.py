"""README.md and docs/ cannot rot: every stage command in their shell blocks runs as a dry run (composed,
validated, submitting lines through their launcher's dry run), and every link or backticked path to a file of
the repository exists (tests/docs_commands.py). A doctored page fails, naming its line and what is wrong."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from olmocr.config import PROJECT_ROOT

PAGES = ["README.md", *sorted(os.path.relpath(p, PROJECT_ROOT) for p in glob.glob(f"{PROJECT_ROOT}/docs/*.md"))]


def check(*pages: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(PROJECT_ROOT, "tests", "docs_commands.py"), *pages],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900)


def test_readme_is_short_and_links_every_page():
    readme = open(os.path.join(PROJECT_ROOT, "README.md")).read()
    assert len(readme.splitlines()) < 200
    assert readme.startswith("```bash\nbash scripts/setup.sh && .venv/bin/python -m olmocr.train\n"
                             "bash scripts/setup.sh --dev && .venv/bin/python -m pytest -n auto --integration\n```\n")
    assert all(f"]({page})" in readme for page in PAGES if page != "README.md")


@pytest.mark.integration
def test_every_documented_command_composes_and_every_link_leads_somewhere():
    proc = check(*PAGES)
    assert proc.returncode == 0, "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("ok"))
    ran = [line for line in proc.stdout.splitlines() if line.startswith("ok")]
    assert len(ran) > 60  # the pages' commands were found and run, not skipped
    for module in ("olmocr.train", "olmocr.pipeline", "olmocr.bench", "olmocr.prepare", "olmocr.datasets"):
        assert any(f"-m {module} " in line for line in ran), module


def test_a_renamed_key_a_renamed_stage_and_a_dead_link_fail_with_their_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("""# A page gone stale

Keep the best checkpoint ([the training page](training.md)), then release it with `scripts/release.sh`:

```bash
.venv/bin/python -m olmocr.train checkpoint.keep_bestt=eval/bench/overall     # the key was renamed
.venv/bin/python -m olmocr.releases 'sources=[outputs/train/tiny_sft]'     # so was the stage
.venv/bin/python -m olmocr.prepare 'sources=[outputs/train/tiny_sft]' step=best output=outputs/release/best
```
""")
    proc = check(str(page))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert any(line.startswith(f"FAIL {os.path.relpath(page, PROJECT_ROOT)}:3: training.md does not exist")
               for line in lines), lines
    assert any(line.endswith("scripts/release.sh does not exist") for line in lines), lines
    failed = [line for line in lines if line.startswith("FAIL") and ":6 " in line]
    assert failed and "checkpoint.keep_bestt" in proc.stdout
    assert any(line.startswith("FAIL") and ":7 " in line for line in lines), lines
    assert any(line.startswith("ok") and ":8 " in line for line in lines), lines
