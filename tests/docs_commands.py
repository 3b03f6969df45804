"""The shell commands and file links of README.md and docs/, and a runner that tries every stage command as
a dry run: ``python tests/docs_commands.py README.md docs/*.md`` prints one line per command and exits 1
when any failed or a link leads nowhere (tests/test_docs.py runs it, and a doctored page through it).

A command line in a ```bash block that runs ``python -m olmocr.<module>`` (also after ``torchrun …``,
``sudo``, or ``VAR=value``) runs in this one process as ``python -m`` would, with ``dry_run=true``: Hydra
composes the stage's config with the line's overrides (a renamed key or config group fails), and the
stage validates it and prints it; nothing is loaded, and the local paths a line reads (a dataset an
earlier line fetches) are not checked. On a submitting line (``cluster=<name>``) that is the
launcher's dry run, which writes the job script or spec and submits nothing. Modules that are tools,
not stages, answer ``--help``. ``export`` lines set the environment of the lines after them; ``mkdir``
and ``printf`` lines run (in a scratch directory, the command's working directory and ``$HOME``), so a
cluster file a block writes is there for the line that uses it. Other lines (setup, pip, scripts) are not run.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHONS = {"python", "python3", ".venv/bin/python", "torchrun"}
RUN_AS_IS = {"mkdir", "printf"}
# Backticked paths under these folders must exist (unless they hold a placeholder or a wildcard).
REPO_DIRS = ("conf/", "olmocr/", "scripts/", "tests/", "benchmarks/", "launchers/", "docs/", "packaging/",
             "data/sample")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# What the cluster pages ask a user to set before submitting (accounts, workspaces: not secrets), so a
# submitting line's dry run gets as far as writing its job.
CLUSTER_ENV = {"SLURM_ACCOUNT": "lab", "BEAKER_WORKSPACE": "ai2/olmocr", "BEAKER_BUDGET": "ai2/oe-base",
               "OLMOCR_BEAKER_IMAGE": "me/olmocr"}
TICKED = re.compile(r"`([^`\s]+)`")


@dataclass
class Command:
    where: str  # file:line
    line: str
    module: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def shell_blocks(path: str):
    """(line number, command) for every command of every ```bash block, continuation lines joined."""
    inside, pending, start = False, "", 0
    for number, line in enumerate(open(path, encoding="utf-8"), start=1):
        stripped = line.rstrip("\n")
        if stripped.startswith("```"):
            inside = stripped.strip() == "```bash" if not inside else False
            continue
        if not inside:
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        yield start, pending + stripped
        pending = ""


def commands(path: str, workdir: str) -> list[Command]:
    out, env = [], {}
    rel = os.path.relpath(path, ROOT)
    for number, text in shell_blocks(path):
        for part in text.split("&&"):
            try:
                words = shlex.split(part, comments=True)
            except ValueError as exc:
                out.append(Command(f"{rel}:{number}", part.strip(), module="", args=[f"unparsable: {exc}"]))
                continue
            if not words:
                continue
            if words[0] == "export":
                env.update(w.split("=", 1) for w in words[1:] if "=" in w)
                continue
            if words[0] in RUN_AS_IS:
                subprocess.run(part, shell=True, cwd=workdir, check=False, env={**os.environ, "HOME": workdir})
                continue
            local = dict(env)
            while words and (words[0] == "sudo" or re.match(r"^[A-Z_][A-Z0-9_]*=", words[0])):
                if words[0] != "sudo":
                    key, value = words[0].split("=", 1)
                    local[key] = value
                words = words[1:]
            if not words or words[0] not in PYTHONS or "-m" not in words:
                continue
            at = words.index("-m")
            if at + 1 >= len(words) or not words[at + 1].startswith("olmocr"):
                continue
            args = [os.path.expandvars(a.replace("$PWD", workdir).replace("$HOME", workdir)) for a in words[at + 2:]]
            out.append(Command(f"{rel}:{number}", part.strip(), words[at + 1], args, local))
    return out


def links(path: str) -> list[tuple[str, str]]:
    """(file:line, target) of every link and backticked repository path that leads nowhere."""
    broken = []
    rel = os.path.relpath(path, ROOT)
    base = os.path.dirname(path)
    inside = False
    for number, line in enumerate(open(path, encoding="utf-8"), start=1):
        if line.startswith("```"):
            inside = not inside
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+://|^#|^mailto:", target):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(base, target.split("#")[0]))):
                broken.append((f"{rel}:{number}", target))
        if inside:
            continue
        for target in TICKED.findall(LINK.sub("", line)):  # a link's own text may name another repository's file
            target = target.rstrip(".,:;")
            if (target.startswith(REPO_DIRS) and not re.search(r"[*<>…{}$\[]|\.\.\.", target)
                    and not os.path.exists(os.path.join(ROOT, target))):
                broken.append((f"{rel}:{number}", target))
    return broken


def dry_run(command: Command) -> str | None:
    """None when the command's dry run succeeds, else the last lines it printed."""
    from hydra.core.global_hydra import GlobalHydra

    from olmocr.cli import Stage, stages

    stage = command.module in stages()
    args = [*command.args, "dry_run=true"] if stage else ["--help"]  # with cluster=: the launcher's dry run
    saved_env, saved_argv = dict(os.environ), sys.argv
    os.environ.update({**CLUSTER_ENV, **command.env})
    sys.argv = [command.module, *args]
    out, code = io.StringIO(), 0
    checks_paths = Stage.check_paths
    Stage.check_paths = lambda self, cfg: None  # the data a line reads is fetched by a line before it, not here
    try:
        GlobalHydra.instance().clear()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_module(command.module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # noqa: BLE001 - any failure of a documented command is the finding
        code, _ = 1, out.write(f"{type(exc).__name__}: {exc}")
    finally:
        Stage.check_paths = checks_paths
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
    if code:
        return " | ".join(line for line in out.getvalue().strip().splitlines()[-3:])
    return None


def main(paths: list[str]) -> int:
    import tempfile

    failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        os.chdir(workdir)  # run dirs (outputs/…) and files a block writes land here
        for path in paths:
            path = os.path.abspath(os.path.join(ROOT, path)) if not os.path.isabs(path) else path
            for where, target in links(path):
                print(f"FAIL {where}: {target} does not exist")
                failed += 1
            for command in commands(path, workdir):
                began = time.monotonic()
                error = dry_run(command)
                print(f"{'FAIL' if error else 'ok  '} {command.where} ({time.monotonic() - began:.1f} s): {command.line}"
                      + (f"\n     {error}" if error else ""))
                failed += bool(error)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
