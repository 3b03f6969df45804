"""Hydra's LauncherTestSuite and BatchedSweeperTestSuite pass for the Beaker launcher (see beaker_suite.py)."""

import os
import re
import subprocess
import sys

import pytest

from olmocr.config import PROJECT_ROOT


@pytest.mark.integration
def test_hydra_launcher_suites_pass(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", PROJECT_ROOT,
                           os.path.join(PROJECT_ROOT, "tests", "beaker_suite.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert re.search(r"\b10 passed\b", proc.stdout), proc.stdout[-2000:]
