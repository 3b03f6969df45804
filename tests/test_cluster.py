"""cluster=…: SLURM/Frontier sbatch scripts (dry runs), checks before submitting, a user's own cluster file,
and every cluster file composing for every stage. Jobs run on a real scheduler in test_slurm.py."""

import glob
import os
import re
import subprocess
import sys

import pytest

from olmocr.cli import stages, submit_on_cluster
from olmocr.config import PROJECT_ROOT


def stage(python, args, tmp_path, module="olmocr.synth", env=None, timeout=300):
    return subprocess.run([python, "-m", module, *args, f"hydra.sweep.dir={tmp_path / 'sweep'}",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_frontier_script_follows_olcf_guidance(tmp_path, warm_python):
    proc = stage(warm_python, ["-m", "cluster=frontier", "hydra.launcher.dry_run=true", "hydra.launcher.nodes=2",
                               "seed=1,2"], tmp_path, module="olmocr.train", env={"SLURM_ACCOUNT": "abc123"})
    assert proc.returncode == 0, proc.stderr
    scripts = sorted(p for p in os.listdir(tmp_path / "sweep") if p.startswith("sbatch_"))
    assert scripts == ["sbatch_0.sh", "sbatch_1.sh"]  # one job per sweep point
    script = (tmp_path / "sweep" / "sbatch_0.sh").read_text()
    for line in ("#SBATCH --account=abc123", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8",
                 "#SBATCH --gpus-per-task=1", "#SBATCH --gpu-bind=closest", "#SBATCH --cpus-per-task=7",
                 "#SBATCH --partition=batch", "#SBATCH --job-name=olmocr-train",
                 "module load PrgEnv-gnu rocm/6.2.4 craype-accel-amd-gfx90a",
                 "export MIOPEN_USER_DB_PATH=/tmp/$USER-miopen-$SLURM_JOB_ID", "export NCCL_SOCKET_IFNAME=hsn0",
                 "export HF_HUB_OFFLINE=1", "export HF_HOME=/lustre/orion/abc123/proj-shared/hf_cache"):
        assert line in script.splitlines(), line
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert "--gpus-per-task=1 --gpu-bind=closest --network=disable_rdzv_get" in srun
    assert srun.endswith(f"-u -m submitit.core._submit {tmp_path / 'sweep' / '.submitit'}")


def test_one_command_submits_without_minus_m(tmp_path, warm_python):
    # One run: its job runs in the run dir the command has here; a sweep's jobs in the stage's sweep dirs.
    one_run = ["hydra.sweep.dir=${hydra.run.dir}", "hydra.sweep.subdir=."]
    assert submit_on_cluster(["x", "cluster=slurm", "seed=1"]) == ["x", "--multirun", *one_run, "cluster=slurm", "seed=1"]
    assert submit_on_cluster(["x", "cluster=slurm", "seed=1,2"]) == ["x", "--multirun", "cluster=slurm", "seed=1,2"]
    assert submit_on_cluster(["x", "cluster=slurm", "replica=range(3)"])[2] == "cluster=slurm"
    assert submit_on_cluster(["x", "cluster=local"]) == ["x", "cluster=local"]
    assert submit_on_cluster(["x", "-m", "cluster=slurm"]) == ["x", "-m", "cluster=slurm"]
    # dry_run=true is the launcher's dry run: the script written, nothing submitted (no sbatch needed)
    proc = stage(warm_python, ["cluster=slurm", "dry_run=true", "hydra.launcher.account=p1",
                               "hydra.launcher.srun_args=['--cpu-bind=cores']",
                               "+hydra.launcher.additional_parameters.mail-type=END"], tmp_path, module="olmocr.train",
                 env={"PATH": os.path.dirname(sys.executable)})
    assert proc.returncode == 0, proc.stderr
    assert f"dry run: #0 (no overrides): its sbatch script {tmp_path / 'sweep' / 'sbatch_0.sh'}" in proc.stdout
    assert not (tmp_path / "sweep" / ".submitit").exists()
    script = (tmp_path / "sweep" / "sbatch_0.sh").read_text()
    assert "#SBATCH --account=p1" in script and "#SBATCH --mail-type=END" in script
    assert "#SBATCH --ntasks-per-node=8" in script and "#SBATCH --gpus-per-task=1" in script
    assert "--cpu-bind=cores" in next(line for line in script.splitlines() if line.startswith("srun "))


def test_a_dry_run_checks_the_paths_the_run_reads(tmp_path, warm_python):
    """The run stops at once for a bench folder that is not there: so does its dry run (one line, no run dir). A
    SLURM job reads the same files as a rule, but its nodes may mount what this machine does not: a warning."""
    missing = tmp_path / "no_bench"
    proc = stage(warm_python, ["dry_run=true", f"eval.bench.root={missing}"], tmp_path, module="olmocr.train")
    assert (proc.returncode, proc.stderr.count("\n")) == (2, 1), proc.stderr
    assert proc.stderr.startswith(f"error: eval.bench.root: {missing} is not a folder")
    assert not (tmp_path / "run").exists()
    proc = stage(warm_python, ["cluster=slurm", "dry_run=true", "hydra.launcher.account=p1", f"eval.bench.root={missing}"],
                 tmp_path, module="olmocr.train", env={"PATH": os.path.dirname(sys.executable)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(f"warning: eval.bench.root: {missing} is not a folder")
    assert proc.stderr.rstrip().endswith("(checked here; the job stops for it at once where its nodes see the same files)")
    assert "nothing submitted; not checked by a scheduler (no sbatch here)" in proc.stdout


def test_a_stage_that_is_not_distributed_gets_one_task_with_the_nodes_gpus(tmp_path, warm_python):
    """Eight tasks of one GPU each would start eight pipeline workers racing for the node's GPUs: a stage
    that does not declare itself distributed gets one task per node, holding what the eight would."""
    proc = stage(warm_python, ["cluster=frontier", "hydra.launcher.dry_run=true", "hydra.launcher.account=p1",
                               "workers=0"], tmp_path, module="olmocr.pipeline")
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "sweep" / "sbatch_0.sh").read_text().splitlines()
    for line in ("#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-task=8", "#SBATCH --cpus-per-task=56"):
        assert line in script, line
    srun = next(line for line in script if line.startswith("srun "))
    assert "--gpus-per-task=8 --gpu-bind=closest" in srun


def test_nothing_is_submitted_without_an_account_or_sbatch(tmp_path, warm_python):
    env = {k: v for k, v in os.environ.items() if k != "SLURM_ACCOUNT"}
    proc = subprocess.run([warm_python, "-m", "olmocr.synth", "cluster=slurm", f"hydra.sweep.dir={tmp_path}/a"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and proc.stderr.startswith("error: hydra.launcher.account: set the SLURM project")
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1  # one line, not Hydra's trace
    proc = stage(warm_python, ["cluster=slurm", "hydra.launcher.account=p1"], tmp_path,
                 env={"PATH": os.path.dirname(sys.executable)})
    assert proc.returncode == 2 and "submits with sbatch, which is not on PATH" in proc.stderr
    assert not (tmp_path / "sweep" / ".submitit").exists() or not os.listdir(tmp_path / "sweep" / ".submitit")


def test_a_slurm_conf_that_is_not_there_is_said_at_once(tmp_path, warm_python):
    """SLURM's tools wait 60 s for a configuration file that is not there: a submission says so in one line
    before asking them, a dry run writes its script and says why the scheduler did not check it. (On PATH, a
    sbatch that would answer anything else: the check comes first.)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\nsleep 120\n")
    (bin_dir / "sbatch").chmod(0o755)
    missing = tmp_path / "slurm" / "slurm.conf"
    env = {"PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}", "SLURM_CONF": str(missing)}
    proc = stage(warm_python, ["cluster=slurm", "hydra.launcher.account=p1"], tmp_path, env=env, timeout=60)
    assert proc.returncode == 2 and proc.stderr == (f"error: SLURM_CONF: {missing} does not exist: point it at the "
                                                    "cluster's slurm.conf, or unset it to use the installed one\n")
    proc = stage(warm_python, ["cluster=slurm", "dry_run=true", "hydra.launcher.account=p1"], tmp_path, env=env,
                 timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"nothing submitted; not checked by a scheduler (SLURM_CONF: {missing} does not exist)" in proc.stdout
    assert (tmp_path / "sweep" / "sbatch_0.sh").exists()


def test_unknown_cluster_names_the_options(tmp_path, warm_python):
    proc = stage(warm_python, ["cluster=frontire"], tmp_path)
    assert (proc.returncode, proc.stderr) == (2, "error: cluster=frontire: no such option in conf/cluster/; did you mean "
                                                 "frontier? (the options: beaker, frontier, local, slurm, submitit_local)\n")


def test_a_users_cluster_file_needs_no_code(tmp_path, warm_python):
    mine = tmp_path / "conf" / "cluster"
    mine.mkdir(parents=True)
    (mine / "mylab.yaml").write_text(
        "# @package _global_\ndefaults:\n  - slurm\n  - _self_\n"
        "hydra:\n  launcher:\n    account: lab\n    partition: a100\n    tasks_per_node: 4\n"
        "    setup: ['source /opt/lab/env.sh']\n")
    proc = stage(warm_python, [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "cluster=mylab",
                               "hydra.launcher.dry_run=true"], tmp_path, module="olmocr.train")
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "sweep" / "sbatch_0.sh").read_text()
    assert "#SBATCH --partition=a100" in script and "#SBATCH --ntasks-per-node=4" in script
    assert "source /opt/lab/env.sh" in script


@pytest.mark.parametrize("overrides, error", [
    (["trainer.batch_size=2,0"], "trainer.batch_size: must be at least 1, got 0"),  # the sweep's second job
    (["data=folder"], "data.roots: required, give data.roots=…"),
    (["+trainer.batch_sise=3"], "trainer.batch_sise: no such key in TrainerConfig (did you mean trainer.batch_size?)"),
    # what the job's processes (one per task) must allow: GRPO's groups split over them
    (["+experiment=grpo_tiny", "trainer.batch_size=1", "hydra.launcher.tasks_per_node=2"],
     "algo.num_generations=4 must divide the completions per step, trainer.batch_size × trainer.grad_accum × "
     "processes = 1 × 1 × 2 = 2 (batch_size counts completions)"),
])
def test_every_job_is_checked_as_it_will_check_itself_before_anything_is_submitted(overrides, error, tmp_path,
                                                                                   warm_python):
    """A job that would fail on its first line on the cluster, after hours in the queue, is refused here:
    no script written, nothing submitted (without sbatch on PATH, the config is still checked first)."""
    proc = stage(warm_python, ["-m", "cluster=slurm", "hydra.launcher.account=p1", *overrides], tmp_path,
                 module="olmocr.train", env={"PATH": os.path.dirname(sys.executable)})
    assert proc.returncode == 2 and proc.stderr == f"error: {error}\n"
    assert not glob.glob(str(tmp_path / "sweep" / "sbatch_*")) and not (tmp_path / "sweep" / ".submitit").exists()


COUNTED = """
import runpy, sys
import olmocr.cli
from hydra._internal.config_loader_impl import ConfigLoaderImpl

composed, compose = [], ConfigLoaderImpl.load_sweep_config


def counted(self, *args, **kwargs):
    composed.append(1)
    return compose(self, *args, **kwargs)


ConfigLoaderImpl.load_sweep_config = counted
olmocr.cli.counted.__defaults__ = (0.0,)  # its progress line after every job, not every 10 s
sys.argv = ["olmocr.pipeline", *sys.argv[1:]]
try:
    runpy.run_module("olmocr.pipeline", run_name="__main__", alter_sys=True)
finally:
    print(f"composed {len(composed)}", file=sys.stderr)
"""


def test_a_cluster_launcher_composes_each_job_once_before_submitting(tmp_path, warm_python):
    # Hydra's sweeper composed every job to check the batch, and the launcher again to check and submit it:
    # a 128-replica pipeline array took 61 s to submit, 37 s now.
    proc = subprocess.run([warm_python, "-c", COUNTED, "-m", "cluster=slurm", "replica=range(4)", "workspace=ws",
                           "hydra.launcher.account=p1", "hydra.launcher.dry_run=true", f"hydra.sweep.dir={tmp_path}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == "composed 4"
    # A long check says how far it is (olmocr.cli.counted): 1,000 jobs take minutes.
    progress = re.findall(r"checked (\d)/4 jobs \(\d+\.\d jobs/s, \d+ s to go\)", proc.stdout + proc.stderr)
    assert progress == ["1", "2", "3"], proc.stdout
    assert sorted(p.name for p in tmp_path.glob("sbatch_*.sh")) == [f"sbatch_{i}.sh" for i in range(4)]


LAUNCHERS = {"local": "OlmocrLocalLauncher", "submitit_local": "LocalLauncher", "slurm": "OlmocrSlurmLauncher",
             "frontier": "OlmocrSlurmLauncher", "beaker": "BeakerLauncher"}


def test_every_cluster_file_is_checked():
    from olmocr.config import CONF_DIR

    assert sorted(p[:-5] for p in os.listdir(os.path.join(CONF_DIR, "cluster"))) == sorted(LAUNCHERS)


@pytest.mark.parametrize("cluster", sorted(LAUNCHERS))
@pytest.mark.integration
def test_every_cluster_composes_for_every_stage(cluster):
    from hydra import compose, initialize_config_dir

    from olmocr.config import CONF_DIR, register_schemas

    register_schemas()
    for config in sorted(stage.config for stage in stages().values()):
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name=config, overrides=[f"cluster={cluster}"], return_hydra_config=True)
        assert cfg.hydra.launcher._target_.rsplit(".", 1)[1] == LAUNCHERS[cluster], (config, cfg.hydra.launcher._target_)
