"""The package layering of pyproject.toml's [tool.importlinter] contracts holds, each contract breaks when
the import it forbids appears, and every command of the package is a declared stage."""

import os
import re
import shutil
import subprocess
import sys

from olmocr.cli import stages
from olmocr.config import PROJECT_ROOT

# Commands of the package that are tools with their own argparse line, not Hydra stages.
TOOLS = {"olmocr.utils.sync", "olmocr.utils.guard"}

LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint_imports(root: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.path.join(root, "launchers")])}
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120,
                          env=env)


def test_the_layering_holds():
    proc = lint_imports(PROJECT_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "broken" not in proc.stdout.lower().split("contracts:")[-1].replace("0 broken", "")


def test_each_contract_breaks_on_the_import_it_forbids(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(os.path.join(PROJECT_ROOT, "olmocr"), root / "olmocr",
                    ignore=shutil.ignore_patterns("node_modules", "__pycache__"))
    shutil.copytree(os.path.join(PROJECT_ROOT, "launchers"), root / "launchers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(PROJECT_ROOT, "pyproject.toml"), root)
    injected = {  # module -> the import added to it
        "olmocr/formats/frontmatter.py": "import olmocr.data.steps",  # a cycle, and a lower layer importing up
        "olmocr/train/hf.py": "import olmocr.pipeline.queue",  # the trainer importing the pipeline
        "olmocr/bench/score.py": "import olmocr.models.source",  # the bench importing models
        "launchers/hydra_plugins/olmocr_launchers/slurm.py": "import olmocr.train.grpo",  # a launcher, a stage
    }
    for path, line in injected.items():
        with open(root / path, "a") as fh:
            fh.write(f"\n{line}  # noqa\n")
    out = lint_imports(str(root)).stdout
    assert "Contracts: 0 kept, 5 broken." in out, out
    assert "- .data -> .formats" in out or "- .formats -> .data" in out  # the cycle is named
    for importer, line in injected.items():
        module = line.split()[1]
        assert f"{importer[:-3].replace('/', '.').removeprefix('launchers.')} -> {module}" in out, (importer, out)


def test_every_python_m_entry_is_a_declared_stage():
    """A command written without @stage would have no --help, dry run or cluster submission of ours, and no
    test would cover it: the registry is the declaration, so there is nothing else to forget."""
    entries = set()
    for folder, dirs, files in os.walk(os.path.join(PROJECT_ROOT, "olmocr")):
        dirs[:] = [d for d in dirs if os.path.isfile(os.path.join(folder, d, "__init__.py"))]
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and re.search(r'^if __name__ == "__main__":', open(path).read(), re.M):
                module = os.path.relpath(path, PROJECT_ROOT)[:-3].replace(os.sep, ".")
                entries.add(module.removesuffix(".__main__"))
    assert entries - TOOLS == set(stages()) and TOOLS <= entries
