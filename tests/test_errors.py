"""Which errors a stage says in one line and which keep their traceback (olmocr.errors, olmocr.cli)."""

import os
import subprocess
import sys

import pytest

# A stage declared as every stage is, whose run has a bug for seed=0: PIL refuses the negative width with a
# ValueError of its own, which is not the user's to fix. A negative seed is the user's mistake, said as one.
STAGE = '''
from PIL import Image

import olmocr.synth.schema  # noqa: F401 - puts the synth config's schema in Hydra's store
from olmocr.cli import stage
from olmocr.errors import UserError


@stage("synth")
def run(cfg, output_dir):
    if cfg.seed < 0:
        raise UserError(f"seed: expected 0 or more, got {cfg.seed}")
    Image.new("RGB", (cfg.seed - 100, 8))


if __name__ == "__main__":
    run.main()
'''


@pytest.fixture
def bugged(tmp_path):
    (tmp_path / "bugged_stage.py").write_text(STAGE)

    def run(*overrides: str, full_error: bool = False) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
        if full_error:
            env["HYDRA_FULL_ERROR"] = "1"
        return subprocess.run([sys.executable, "-m", "bugged_stage", f"hydra.run.dir={tmp_path}/run", *overrides],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    return run


def test_a_libraries_value_error_inside_a_stage_keeps_its_traceback(bugged):
    proc = bugged("seed=0")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and 'Image.new("RGB", (cfg.seed - 100, 8))' in proc.stderr
    assert any(line.startswith("ValueError: ") for line in proc.stderr.splitlines())  # PIL's own
    assert not proc.stderr.startswith("error:")


def test_a_users_mistake_is_one_line_and_its_trace_is_there_when_asked(bugged):
    proc = bugged("seed=-3")
    assert (proc.returncode, proc.stderr) == (2, "error: seed: expected 0 or more, got -3\n")
    proc = bugged("seed=-3", full_error=True)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "olmocr.errors.UserError: seed: expected 0 or more, got -3" in proc.stderr
