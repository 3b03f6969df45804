"""`cluster=<a user's cluster file>` against a real SLURM (slurmctld, two slurmd, slurmdbd, munge, started on
this machine by tests/support/slurm_cluster.py): data-parallel training across tasks and across nodes, a job
preempted (it requeues itself) and requeued by the scheduler, a pipeline job array, cancellation, the
scheduler's refusals, and the script written for Frontier."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import STORED_RUN, TWO_RANKS, stored_losses

import olmocr.pipeline.queue as wq
from olmocr.config import PROJECT_ROOT
from olmocr.train.distributed import job_port

pytestmark = pytest.mark.integration
EPHEMERAL_LOW = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])

# A user's cluster file for the local cluster: SLURM's defaults, no GPUs, a core a task.
CLUSTER_FILE = """# @package _global_
defaults:
  - {base}
  - _self_
hydra:
  launcher:
    partition: debug
    tasks_per_node: 2
    gpus_per_task: null
    cpus_per_task: 1
    timeout_min: 10
{extra}"""


def cluster_file(tmp_path, base: str = "slurm", extra: str = "") -> str:
    conf = tmp_path / "conf" / "cluster"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "mylab.yaml").write_text(CLUSTER_FILE.format(base=base, extra=extra))
    return f"hydra.searchpath=[file://{tmp_path / 'conf'}]"


def submit(slurm, tmp_path, module: str, args: list[str], env: dict | None = None, block: bool = True,
           base: str = "slurm", extra: str = "", wait: bool = True, sweep_dir: bool = True):
    """The stage's command line with the user's cluster file, as a user on the login node types it: with
    ``wait=true`` (the command waits for the job to end), the job (one run) in the sweep dir given."""
    command = [sys.executable, "-m", module, cluster_file(tmp_path, base, extra), "cluster=mylab", *args,
               *(["wait=true"] if wait else []), *([f"hydra.sweep.dir={tmp_path / 'sweep'}"] if sweep_dir else [])]
    full_env = {**os.environ, **slurm.environment(), "SLURM_ACCOUNT": "lab", "OMP_NUM_THREADS": "1", **(env or {})}
    if not block:
        return subprocess.Popen(command, cwd=PROJECT_ROOT, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=PROJECT_ROOT, env=full_env, capture_output=True, text=True, timeout=600)


def job_dir(tmp_path) -> str:
    """The run dir of a test's one job: a command that sweeps nothing runs its job in the run dir it has (here
    the sweep dir given), not in a subdir."""
    return str(tmp_path / "sweep")


def train_losses(run: str) -> dict[int, float]:
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if '"train"' in line]
    steps = [r["step"] for r in rows]
    assert steps == sorted(set(steps)), steps  # each step once, in order
    return {r["step"]: r["train/loss"] for r in rows}


def scheduler(slurm, *command: str) -> str:
    return subprocess.run(list(command), env={**os.environ, **slurm.environment()}, capture_output=True,
                          text=True, timeout=60, check=True).stdout.strip()


def submitted(tmp_path) -> str:
    """The id of the job this test submitted (other tests' jobs share the cluster)."""
    folder = tmp_path / "sweep" / ".submitit"
    return wait_for(lambda: folder.exists() and next((d for d in os.listdir(folder) if d.isdigit()), None), 60,
                    "the job is submitted")


def wait_for(condition, timeout_s: float, what: str, proc=None, tmp_path=None):
    """condition's first true value. With ``proc`` (the submitting command) and ``tmp_path``, a failure, past
    the timeout or once the command has ended, shows what the job was doing (the command's output, the job's
    logs' tails, the machine's load, its processes' states), as a stall or an early end on a loaded machine is
    otherwise gone when anyone looks."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the submitting command ended (exit code {proc.returncode}) before {what}\n"
                                 f"--- its output\n{(out + err)[-3000:]}" + job_evidence(tmp_path))
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}" + (job_evidence(tmp_path) if tmp_path else ""))


def job_evidence(tmp_path) -> str:
    parts = [f"load average: {open('/proc/loadavg').read().strip()}"]
    for path in sorted(glob.glob(str(tmp_path / "sweep" / "**" / "*.log"), recursive=True)
                       + glob.glob(str(tmp_path / "sweep" / ".submitit" / "**" / "*.err"), recursive=True)):
        lines = open(path, errors="replace").read().splitlines()[-15:]
        parts.append(f"--- {os.path.relpath(path, tmp_path)}\n" + "\n".join(lines))
    ps = subprocess.run(["ps", "-eo", "pid,ppid,stat,pcpu,etime,wchan:20,args", "--sort=-pcpu"],
                        capture_output=True, text=True).stdout.splitlines()
    parts.append("--- busiest processes\n" + "\n".join(line[:200] for line in ps[:15]))
    return "\n" + "\n".join(parts)


def test_two_tasks_of_one_node_train_data_parallel_to_the_stored_losses(slurm, tmp_path, cache_dir):
    """Two tasks on one node join one gloo group from the job's SLURM environment: each step sees both
    ranks' samples, and the losses are the stored run's (one process, batch 2), its first 10 steps."""
    proc = submit(slurm, tmp_path, "olmocr.train", [*TWO_RANKS, "checkpoint.interval=null", "trainer.hard_stop.value=10"],
                  env={"OLMOCR_CACHE": cache_dir})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = job_dir(tmp_path)
    # The rendezvous port comes from the job id, below the ephemeral ports a client connection may hold.
    job = submitted(tmp_path)
    log = open(os.path.join(run, "train.log")).read()
    assert all(f"rank {r} of 2: gloo process group, rendezvous at " in log for r in (0, 1))
    assert log.count(f":{job_port(job)}\n") == 2 and job_port(job) < EPHEMERAL_LOW
    want = stored_losses()
    got = train_losses(run)
    assert list(got) == list(range(1, 11))
    assert all(got[s] == pytest.approx(want[s], abs=1e-4) for s in got)
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    assert all(r["train/samples"] == 2 for r in rows)
    logs = glob.glob(str(tmp_path / "sweep" / ".submitit" / "*" / "*_log.err"))
    assert len(logs) == 2  # one per task


def test_two_nodes_preempted_and_requeued_resume_to_the_stored_losses(slurm, tmp_path, cache_dir):
    """One task on each of two nodes (rendezvous at the first node of the job's node list). While it runs,
    it is sent the preemption signal (`scancel --signal=USR2`: the job requeues itself), then the scheduler
    requeues it (`scontrol requeue`: SIGTERM to every process of the job, which trains on until SIGKILL, and
    runs it again under the same id). Each time it resumes from its newest checkpoint in the same job dir,
    and the run ends with the losses of one uninterrupted run, every step once, no page dropped, and the
    submitting command succeeds (the SIGTERM reaches the data loader's worker too, which must not take the
    trainer down with a failure while the job goes on). (A held-out loss each step makes the steps slow
    enough to interrupt twice, and the whole stored run of 30 steps outlasts the scheduler's SIGKILL, which on
    a loaded machine comes seconds after KillWait: a job that ends first is done and not run again.)"""
    proc = submit(slurm, tmp_path, "olmocr.train",
                  [*TWO_RANKS, "checkpoint.interval=2", "trainer.eval_interval=1",
                   "eval.bench=null",
                   "trainer.num_workers=1", "hydra.launcher.nodes=2", "hydra.launcher.tasks_per_node=1"],
                  env={"OLMOCR_CACHE": cache_dir}, block=False)
    from olmocr.train.checkpoint import complete_checkpoints

    def restarts(job: str) -> int:
        fields = dict(f.split("=", 1) for f in scheduler(slurm, "scontrol", "-o", "show", "job", job).split()
                      if "=" in f)
        return int(fields["Restarts"]) if fields["JobState"] == "RUNNING" else -1

    def newest() -> int:
        root = os.path.join(job_dir(tmp_path), "checkpoints")
        return max(complete_checkpoints(root), default=0) if os.path.isdir(root) else 0

    try:
        job = submitted(tmp_path)
        wait_for(newest, 120, "a first checkpoint", proc, tmp_path)
        scheduler(slurm, "scancel", "--signal=USR2", job)
        before = wait_for(lambda: restarts(job) == 1 and newest(), 120, "running again", proc, tmp_path)
        at_requeue = wait_for(lambda: newest() > before and newest(), 120, "a checkpoint after the preemption", proc,
                              tmp_path)
        scheduler(slurm, "scontrol", "requeue", job)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    run = job_dir(tmp_path)
    # The scheduler's SIGTERM reaches the tools the job runs too; a render it ended is done again.
    assert not os.path.exists(os.path.join(run, "rejected.jsonl")), open(os.path.join(run, "rejected.jsonl")).read()
    got, want = train_losses(run), stored_losses()
    assert list(got) == list(range(1, 31))
    assert all(got[s] == pytest.approx(want[s], abs=1e-4) for s in got)
    log = open(os.path.join(run, "train.log")).read()  # the stage's log, which every run appends to
    assert "Caught signal SIGUSR2" in log and log.count("requeued job") == 1  # the other restart: the scheduler's
    # Each rerun names the checkpoint it starts from: the newest when it starts.
    resumed = [line.split("checkpoints/")[1].split()[0] for line in log.splitlines() if "resuming from" in line]
    assert len(resumed) == 2 and int(resumed[0][5:]) == before and int(resumed[1][5:]) >= at_requeue, resumed
    wait_for(lambda: scheduler(slurm, "sacct", "-n", "-X", "-j", job, "-o", "State").split() == ["COMPLETED"], 30,
             "the job is COMPLETED in the accounting database")
    assert "Restarts=2" in scheduler(slurm, "scontrol", "show", "job", job)


def test_a_pipeline_job_array_converts_a_workspace_exactly_once(slurm, tmp_path):
    """`replica=0,1,2` (cluster= makes any command a sweep) is one job array of three workers on one
    workspace: every item done once."""
    from olmocr.pipeline.workspace import Workspace
    from work_helpers import done_records

    pdfs = os.path.join(PROJECT_ROOT, "data", "sample", "train", "pdfs")
    workspace = str(tmp_path / "workspace")
    proc = submit(slurm, tmp_path, "olmocr.pipeline",
                  ["replica=0,1,2", f"workspace={workspace}", f"pdfs=[{pdfs}]", "pages_per_group=1",
                   "progress=false", "queue.poll_s=1", "work=inventory", "hydra.launcher.tasks_per_node=1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    ws = Workspace(workspace)
    items = {item.id for item in wq.items(ws)}
    records = [done_records(ws)[i] for i in items]
    assert len(items) > 3 and len(records) == len(items)
    finished = [json.load(open(tmp_path / "sweep" / job / "run_info.json"))["summary"]["work"]["done"]
                for job in ("0", "1", "2")]
    assert sum(finished) == len(items)
    tasks = sorted(d for d in os.listdir(tmp_path / "sweep" / ".submitit") if d[0].isdigit() and "_" in d)
    array = {t.split("_")[0] for t in tasks}
    assert len(tasks) == 3 and len(array) == 1  # three tasks of one array job
    array_id = array.pop()
    # A task's result is written before SLURM has ended it: its state follows.
    wait_for(lambda: sorted(scheduler(slurm, "sacct", "-n", "-X", "-P", "-j", array_id, "-o", "JobID,State").split())
             == [f"{t}|COMPLETED" for t in tasks], 30, "the array's tasks COMPLETED in the accounting database")


def test_a_cancelled_job_leaves_no_process_and_says_so(slurm, tmp_path, cache_dir):
    proc = submit(slurm, tmp_path, "olmocr.train", [*TWO_RANKS, "trainer.max_duration.value=100000",
                                                    "checkpoint.interval=null"],
                  env={"OLMOCR_CACHE": cache_dir}, block=False)
    folder = str(tmp_path / "sweep" / ".submitit")
    try:
        job = submitted(tmp_path)
        wait_for(lambda: os.path.exists(tmp_path / "sweep" / "metrics.jsonl"), 120, "training steps", proc, tmp_path)
        scheduler(slurm, "scancel", job)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert re.fullmatch(rf"error: the SLURM job {job} did not finish \(CANCELLED[^)]*\); its log: "
                        rf"{re.escape(folder)}/{job}/{job}_0_log\.err", err.strip().splitlines()[-1]), err[-2000:]

    def ours():
        ps = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout.splitlines()
        return [line for line in ps if folder in line and " Z" not in line]

    wait_for(lambda: not ours(), 30, f"no process of the job left: {ours()}")
    assert "CANCELLED" in scheduler(slurm, "sacct", "-n", "-X", "-j", job, "-o", "State")


def test_a_submission_says_where_its_job_is_returns_and_the_job_resumes_a_run_started_here(slurm, tmp_path,
                                                                                          cache_dir):
    """A training run stopped here (its hard stop, a checkpoint at step 4), then the same command with cluster=:
    the command says the job's id, run dir and log and returns while the job waits or runs; the job runs in the
    run dir the command has here (the cluster shares the files) and goes on from step 4 to the stored losses."""
    run = tmp_path / "run"
    common = [*STORED_RUN, "checkpoint.interval=2", f"hydra.run.dir={run}"]
    env = {**os.environ, "OLMOCR_CACHE": cache_dir, "OMP_NUM_THREADS": "1"}
    here = subprocess.run([sys.executable, "-m", "olmocr.train", *common, "trainer.hard_stop.value=4"], cwd=PROJECT_ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert here.returncode == 0, here.stderr[-3000:]
    proc = submit(slurm, tmp_path, "olmocr.train", [*common, "hydra.launcher.tasks_per_node=1"],
                  env={"OLMOCR_CACHE": cache_dir}, wait=False, sweep_dir=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = re.fullmatch(rf"#0 (.*): SLURM job (\d+) submitted; run dir {re.escape(str(run))}; its log (\S+) "
                        r"\(follow: tail -f \3; cancel: scancel \2\)", proc.stdout.strip().splitlines()[-1])
    assert said, proc.stdout
    job, log_path = said[2], said[3]
    assert log_path == f"{run}/.submitit/{job}/{job}_0_log.err"
    # The command returned with the job still queued or running.
    assert scheduler(slurm, "squeue", "-h", "-j", job, "-o", "%T") in ("PENDING", "CONFIGURING", "RUNNING")
    wait_for(lambda: scheduler(slurm, "sacct", "-n", "-X", "-j", job, "-o", "State").split() == ["COMPLETED"], 300,
             "the job COMPLETED", tmp_path=tmp_path)
    assert os.path.exists(log_path)
    log = open(run / "train.log").read()
    assert f"resuming from {run}/checkpoints/step_000004" in log
    got, want = train_losses(str(run)), stored_losses()
    assert list(got) == list(range(1, 31))
    assert all(got[s] == pytest.approx(want[s], abs=1e-4) for s in got)


def test_ctrl_c_while_waiting_leaves_the_job_running_and_says_its_id(slurm, tmp_path, cache_dir):
    proc = submit(slurm, tmp_path, "olmocr.train", [*TWO_RANKS, "trainer.max_duration.value=100000",
                                                    "checkpoint.interval=null", "hydra.launcher.tasks_per_node=1"],
                  env={"OLMOCR_CACHE": cache_dir}, block=False)
    try:
        job = submitted(tmp_path)
        wait_for(lambda: scheduler(slurm, "squeue", "-h", "-j", job, "-o", "%T") == "RUNNING", 120, "the job runs",
                 proc, tmp_path)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert err.strip().splitlines()[-1] == (
            f"error: stopped waiting; the SLURM job {job} goes on (its log: {tmp_path}/sweep/.submitit/{job}/"
            f"{job}_0_log.err; cancel: scancel {job})"), err[-2000:]
        assert "Traceback" not in err
        time.sleep(2)
        assert scheduler(slurm, "squeue", "-h", "-j", job, "-o", "%T") == "RUNNING"  # the job goes on
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["scancel", job], env={**os.environ, **slurm.environment()}, timeout=60)


def test_a_dry_run_submits_nothing_and_the_scheduler_checks_its_script(slurm, tmp_path):
    """dry_run=true with a cluster is the launcher's dry run: the sbatch script written and checked by the
    scheduler (a partition it does not have: one line), no job in the queue or the accounting database, and the
    stage prepares nothing (the pipeline's queue)."""
    name = f"dry-{os.getpid()}-{time.monotonic_ns()}"
    workspace = tmp_path / "workspace"
    args = ["dry_run=true", f"hydra.launcher.name={name}", "hydra.launcher.tasks_per_node=1", f"workspace={workspace}",
            f"pdfs=[{PROJECT_ROOT}/data/sample/train/pdfs]"]
    proc = submit(slurm, tmp_path, "olmocr.pipeline", [*args, "hydra.launcher.partition=gpu"], wait=False)
    assert (proc.returncode, proc.stderr) == (2, "error: sbatch refused the job (hydra.launcher.partition=gpu): "
                                                 "Invalid partition name specified\n")
    proc = submit(slurm, tmp_path, "olmocr.pipeline", args, wait=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    script = tmp_path / "sweep" / "sbatch_0.sh"
    # The job's own overrides: the PDFs are queued here before a real submission, not by the job.
    assert proc.stdout.strip().splitlines()[-1] == (f"dry run: #0 workspace={workspace}: its sbatch script {script}, "
                                                    f"run dir {tmp_path / 'sweep'}; nothing submitted")
    assert f"#SBATCH --job-name={name}" in script.read_text()
    assert not (tmp_path / "sweep" / ".submitit").exists() and not workspace.exists()
    assert scheduler(slurm, "squeue", "-h", "-n", name) == ""
    assert scheduler(slurm, "sacct", "-n", "-X", "-a", f"--name={name}", "-S", "2000-01-01") == ""


@pytest.mark.parametrize("option, value", [("partition", "gpu"), ("account", "nobody"), ("nodes", "3"),
                                           ("cpus_per_task", "64")])
def test_what_the_scheduler_refuses_is_one_line_before_any_work(slurm, tmp_path, option, value):
    workspace = tmp_path / "workspace"
    proc = submit(slurm, tmp_path, "olmocr.pipeline", ["hydra.launcher.tasks_per_node=1", f"hydra.launcher.{option}={value}",
                                                       f"workspace={workspace}",
                                                       f"pdfs=[{PROJECT_ROOT}/data/sample/train/pdfs]"])
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: sbatch refused the job (hydra.launcher.{option}={value}): ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not workspace.exists()  # nothing queued: the check comes before the pipeline prepares its queue


def test_a_job_that_fails_says_its_own_error_in_the_submitting_command(slurm, tmp_path):
    """The stage's one-line error, written in the job, is what the submitting command says (with the job, its
    state and its log), not only that the job did not finish."""
    (tmp_path / "a_file").write_text("")
    out = tmp_path / "a_file" / "pages"
    proc = submit(slurm, tmp_path, "olmocr.synth", ["hydra.launcher.tasks_per_node=1", "num_pages=1", f"out_dir={out}"])
    assert proc.returncode == 2
    job = submitted(tmp_path)
    assert proc.stderr.splitlines()[-1] == (f"error: the SLURM job {job} did not finish (FAILED): out_dir={out}: not a "
                                            f"directory: {out}; its log: {tmp_path}/sweep/.submitit/{job}/{job}_0_log.err")


def test_the_frontier_script_runs_on_a_real_scheduler(slurm, tmp_path):
    """What cluster=frontier writes (modules, ROCm and network settings, offline Hugging Face, a shared
    cache, srun's GPU binding and network options), submitted as a user's cluster file derived from it: only
    what this cluster lacks (GPUs, the batch partition, 8 tasks of 7 cores) is overridden, and `module`
    only says what it was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "module").write_text("#!/bin/sh\necho \"module $*\" >&2\n")
    (bin_dir / "module").chmod(0o755)
    out = tmp_path / "pages"
    proc = submit(slurm, tmp_path, "olmocr.synth", ["num_pages=1", f"out_dir={out}"], base="frontier",
                  extra="    srun_args: [--gpu-bind=closest, --network=disable_rdzv_get]\n",
                  env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "HF_HOME": str(tmp_path / "hf")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.path.exists(out / "synth.jsonl")
    script = open(glob.glob(str(tmp_path / "sweep" / ".submitit" / "*" / "*_submission.sh"))[0]).read()
    assert "module load PrgEnv-gnu rocm/6.2.4 craype-accel-amd-gfx90a" in script
    err = "".join(open(p).read() for p in glob.glob(str(tmp_path / "sweep" / ".submitit" / "*" / "*_log.err")))
    assert "module load PrgEnv-gnu" in err  # the setup lines ran, in the job


def test_the_service_runs_as_a_slurm_job_and_converts_what_is_submitted_to_it(slurm, tmp_path, cache_dir):
    """cluster= with the service: the command returns once the job is submitted; the job serves (here on this
    machine's loopback: the cluster's nodes are this machine) until cancelled."""
    import urllib.request

    from olmocr.pipeline.server import free_port

    port = free_port("127.0.0.1")
    workspace = tmp_path / "workspace"
    proc = submit(slurm, tmp_path, "olmocr.serve", [f"port={port}", f"workspace={workspace}",
                                                    "hydra.launcher.tasks_per_node=1"],
                  env={"OLMOCR_CACHE": cache_dir}, wait=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = re.search(r"SLURM job (\d+) submitted", proc.stdout)[1]
    base = f"http://127.0.0.1:{port}"
    try:
        def ready():
            try:
                return json.loads(urllib.request.urlopen(f"{base}/ready", timeout=5).read())["status"] == "ready"
            except OSError:
                return False

        wait_for(ready, 240, "the service in the job is ready", tmp_path=tmp_path)
        pdf = open(glob.glob(os.path.join(PROJECT_ROOT, "data", "sample", "eval", "pdfs", "*.pdf"))[0], "rb").read()
        request = urllib.request.Request(f"{base}/v1/jobs", data=pdf, method="POST",
                                         headers={"Content-Type": "application/pdf"})
        submitted_job = json.loads(urllib.request.urlopen(request, timeout=60).read())["id"]
        state = json.loads(urllib.request.urlopen(f"{base}/v1/jobs/{submitted_job}?wait=60", timeout=90).read())
        assert state["status"] == "done", state
        assert os.listdir(workspace / "results")
    finally:
        scheduler(slurm, "scancel", job)
    wait_for(lambda: "CANCELLED" in scheduler(slurm, "sacct", "-n", "-X", "-j", job, "-o", "State"), 60,
             "the service's job CANCELLED")
