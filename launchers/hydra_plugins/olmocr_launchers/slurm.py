"""``hydra/launcher=olmocr_slurm``: hydra-submitit-launcher's SLURM launcher with what it lacks.

Added: ``srun_args`` (extra arguments of the srun line in the sbatch script; submitit supports them,
the upstream config has no field for them), a check of the account and of ``sbatch`` before anything
is submitted, ``dry_run``, which writes each job's sbatch script to the sweep dir and submits nothing,
and one task per node for stages that are not distributed (:class:`olmocr.cli.Launch`): the node's GPUs
and cores all go to that task. Everything else (job arrays for ``-m`` sweeps, requeue on timeout,
results) is upstream's.
"""


import logging
import re
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher

from olmocr.cli import counted, fail

log = logging.getLogger(__name__)


@dataclass
class OlmocrSlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.olmocr_launchers.slurm.OlmocrSlurmLauncher"
    srun_args: list[str] = field(default_factory=list)
    dry_run: bool = False


def sbatch_script(params: dict, folder: str) -> str:
    """The sbatch script submitit writes for one job with these launcher parameters (rendered here,
    without a scheduler: submitit's executor refuses to start where srun is missing)."""
    from submitit import SlurmExecutor

    class ScriptOnly(SlurmExecutor):
        @classmethod
        def affinity(cls) -> int:
            return 1

    executor = ScriptOnly(folder)
    # Launcher keys use submitit's shared names where they exist (timeout_min, tasks_per_node, …).
    executor.update_parameters(**executor._convert_parameters({
        k: v for k, v in params.items() if v is not None and k not in ("submitit_folder", "max_num_timeout", "dry_run")}))
    return executor._make_submission_file_text(f"{executor.python} -u -m submitit.core._submit {folder}", "JOB")


def one_task_per_node(params: dict) -> dict:
    """The job's resources as one task per node: each task's GPUs and cores, times the tasks, go to one."""
    tasks = params.get("tasks_per_node") or 1
    out = dict(params, tasks_per_node=1)
    for key in ("gpus_per_task", "cpus_per_task"):
        if params.get(key):
            out[key] = params[key] * tasks
    if out.get("gpus_per_task"):
        out["srun_args"] = [a if not a.startswith("--gpus-per-task=") else f"--gpus-per-task={out['gpus_per_task']}"
                            for a in params.get("srun_args", [])]
    return out


def requeue(env, countdown: int) -> None:
    """submitit's requeue on preemption (``scontrol requeue`` of the job, run inside the job), with scontrol
    deaf to SIGTERM: the requeue it asks for sends SIGTERM to every process of the job, scontrol included,
    and a scontrol killed before it returned made submitit record the job as failed while SLURM ran it
    again (the submitting command then reported a failure for a job that went on to finish)."""
    subprocess.check_call(["scontrol", "requeue", env.job_id], timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    log.info("requeued job %s (%d remaining timeouts)", env.job_id, countdown)


class OlmocrSlurmLauncher(SubmititSlurmLauncher):
    @property
    def checks_every_job(self) -> bool:
        """Whether launch() composes and checks every job before it submits any (olmocr.cli.jobs_composed_once):
        a declared stage's jobs."""
        return getattr(self.task_function, "stage", None) is not None

    def __call__(self, *args, **kwargs):
        """The job side (in the SLURM task): the stage runs with the requeue above."""
        from submitit.slurm.slurm import SlurmJobEnvironment

        SlurmJobEnvironment._requeue = requeue
        return super().__call__(*args, **kwargs)

    def _prepared(self, stage, config, overrides: list[str]) -> list[str]:
        """A job's overrides once what its stage prepares before submitting is done (not in a dry run)."""
        needs = stage.launch(config)
        if needs.prepare is not None and not self.params.get("dry_run"):
            needs.prepare(config)
        return needs.job_overrides(overrides)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        if not self.params.get("account"):
            fail("hydra.launcher.account: set the SLURM project to charge (SLURM_ACCOUNT or "
                 "hydra.launcher.account=<project>) before submitting")
        stage = getattr(self.task_function, "stage", None)  # what a declared stage needs (olmocr.cli)
        try:
            if stage is not None and not stage.launch(self.config).distributed:
                self.params = one_task_per_node(self.params)
        except ValueError as exc:
            fail(str(exc))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        dry_run = self.params.get("dry_run")
        configs = []
        if stage is not None:  # every job's config is checked as its job will check it, before anything else
            try:
                for overrides in counted(job_overrides):
                    configs.append(self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides)))
                    stage.check_job(configs[-1])
                    needs = stage.launch(configs[-1])
                    if needs.distributed and needs.check_world is not None:  # one task per process
                        needs.check_world(self.params["nodes"] * self.params["tasks_per_node"])
            except ValueError as exc:
                fail(str(exc))
        if not dry_run:
            if shutil.which("sbatch") is None:
                fail("cluster=slurm submits with sbatch, which is not on PATH here: submit from a login node, or "
                     "use hydra.launcher.dry_run=true to see the scripts")
            # The scheduler's own check of the job (partition, account, node count, resources), before
            # the stage prepares anything and before a job exists.
            check = subprocess.run(["sbatch", "--test-only"], input=sbatch_script(self.params, str(sweep_dir)),
                                   capture_output=True, text=True, timeout=120)
            if check.returncode != 0:
                fail(refusal(check.stderr + check.stdout, self.params))
        if stage is not None:
            try:
                job_overrides = [self._prepared(stage, config, list(overrides))
                                 for config, overrides in zip(configs, job_overrides)]
            except ValueError as exc:
                fail(str(exc))
        if dry_run:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            returns = []
            for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
                path = sweep_dir / f"sbatch_{idx}.sh"
                path.write_text(sbatch_script(self.params, str(sweep_dir / ".submitit")))
                log.info("dry run: #%d %s -> %s", idx, " ".join(overrides), path)
                returns.append(JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED,
                                         _return_value=str(path), working_dir=str(sweep_dir)))
            return returns
        params = dict(self.params)
        params.pop("dry_run")
        self.params = params
        from submitit.core.utils import UncompletedJobError

        try:
            return super().launch(job_overrides, initial_job_idx)
        except UncompletedJobError as exc:  # failed, cancelled, killed, or requeued too often
            fail(unfinished(str(exc)))


def unfinished(account: str) -> str:
    """submitit's account of a job that did not finish, in one line: the job, its state, the job's own last
    error (a stage's one-line error, else the last line of a trace) and where its log is."""
    lines = [line.strip() for line in account.splitlines() if line.strip()]
    head = re.match(r"Job (\S+) \(task: \d+\) with path (\S+)_result\.pkl", lines[0] if lines else "")
    if head is None:
        return f"the SLURM job did not finish: {lines[0] if lines else account}"
    state = re.search(r"\(state: ([^)]*)\)", account)
    stream = lines[lines.index("-" * 40) + 1:] if "-" * 40 in lines else []
    said = [line.removeprefix("error: ") for line in stream if line.startswith("error: ")] or [
        line for line in stream if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", line)]
    return (f"the SLURM job {head[1]} did not finish ({state[1] if state else 'state unknown'})"
            + (f": {said[-1]}" if said else "") + f"; its log: {head[2]}_log.err")


# What sbatch names in a refusal, and the launcher key that sets it.
REFUSED = (("account", "account"), ("partition", "partition"), ("qos", "qos"), ("node count", "nodes"),
           ("time limit", "timeout_min"), ("memory", "mem_gb"), ("gres", "gpus_per_task"),
           ("processors", "cpus_per_task"), ("node configuration", "tasks_per_node"))


def refusal(stderr: str, params: dict) -> str:
    """sbatch's refusal in one line, naming the launcher option it is about."""
    lines = [line.removeprefix("sbatch: error: ").strip() for line in stderr.splitlines() if line.strip()]
    reason = lines[-1].removeprefix("allocation failure: ") if lines else "no reason given"
    key = next((key for word, key in REFUSED if word in " ".join(lines).lower()), None)
    option = f"hydra.launcher.{key}={params.get(key)}" if key else "the job's options"
    return f"sbatch refused the job ({option}): {reason}"


ConfigStore.instance().store(group="hydra/launcher", name="olmocr_slurm", node=OlmocrSlurmConf,
                             provider="olmocr")
