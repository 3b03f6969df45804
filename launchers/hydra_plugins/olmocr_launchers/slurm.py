"""``hydra/launcher=olmocr_slurm``: hydra-submitit-launcher's SLURM launcher with what it lacks.

Added: ``srun_args`` (extra arguments of the srun line in the sbatch script; submitit supports them,
the upstream config has no field for them), a check of the account and of ``sbatch`` before anything
is submitted, a dry run (the stage's ``dry_run=true``), which writes each job's sbatch script to the sweep
dir and submits nothing, one task per node for stages that are not distributed (:class:`olmocr.cli.Launch`):
the node's GPUs and cores all go to that task, and a submission that says where each job is (its id, run dir
and log) and returns, unless the stage's ``wait=true`` asks it to wait for the jobs' results. Job arrays for
``-m`` sweeps and requeue on timeout are upstream's (submitit's).
"""


import logging
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher

from omegaconf import DictConfig, OmegaConf, open_dict

from olmocr.cli import counted, fail, launch_mode, said_in_one_line, say_error, say_warning, shown
from olmocr.private import submitit as submitit_hooks

log = logging.getLogger(__name__)


@dataclass
class OlmocrSlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.olmocr_launchers.slurm.OlmocrSlurmLauncher"
    srun_args: list[str] = field(default_factory=list)
    dry_run: bool = False  # as the stage's dry_run=true: write each job's sbatch script, submit nothing
    wait: bool = False  # as the stage's wait=true: wait for the jobs to end (else return once they are submitted)


def sbatch_script(params: dict, folder: str) -> str:
    """The sbatch script submitit writes for one job with these launcher parameters."""
    # Launcher keys use submitit's shared names where they exist (timeout_min, tasks_per_node, …).
    return submitit_hooks.sbatch_script({k: v for k, v in params.items() if v is not None and k not in (
        "submitit_folder", "max_num_timeout", "dry_run", "wait")}, folder)


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
        """Whether launch() composes and checks every job before it submits any (olmocr.private.hydra): a declared
        stage's jobs."""
        return getattr(self.task_function, "stage", None) is not None

    def __call__(self, *args, **kwargs):
        """The job side (in the SLURM task): the stage runs with the requeue above."""
        submitit_hooks.requeue_with(requeue)
        return super().__call__(*args, **kwargs)

    def _prepared(self, stage, config, overrides: list[str], dry_run: bool) -> list[str]:
        """A job's overrides once what its stage prepares before submitting is done (not in a dry run)."""
        needs = stage.launch(config)
        if needs.prepare is not None and not dry_run:
            needs.prepare(config)
        return needs.job_overrides(overrides)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        if not self.params.get("account"):
            fail("hydra.launcher.account: set the SLURM project to charge (SLURM_ACCOUNT or "
                 "hydra.launcher.account=<project>) before submitting")
        stage = getattr(self.task_function, "stage", None)  # what a declared stage needs (olmocr.cli)
        with said_in_one_line():
            if stage is not None and not stage.launch(self.config).distributed:
                self.params = one_task_per_node(self.params)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        configs = []
        if stage is not None:  # every job's config is checked as its job will check it, before anything else
            with said_in_one_line():
                for num, overrides in enumerate(counted(job_overrides), start=initial_job_idx):
                    configs.append(self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides)))
                    with open_dict(configs[-1].hydra.job):
                        configs[-1].hydra.job.num = num  # as the job will have it (its run dir may name it)
                    stage.check_job(configs[-1])
                    needs = stage.launch(configs[-1])
                    if needs.distributed and needs.check_world is not None:  # one task per process
                        needs.check_world(self.params["nodes"] * self.params["tasks_per_node"])
            # The nodes share this machine's files, as a rule: a path the job reads and this machine lacks is
            # worth a word before the job waits in the queue (a node may mount what this machine does not).
            for problem in dict.fromkeys(filter(None, map(stage.path_problems, configs))):
                say_warning(f"{problem} (checked here; the job stops for it at once where its nodes see the same files)")
        dry_run, wait = launch_mode(configs, self.params)
        unchecked = "not checked by a scheduler (no sbatch here)"
        conf = os.environ.get("SLURM_CONF")
        if shutil.which("sbatch") is None:
            if not dry_run:
                fail("cluster=slurm submits with sbatch, which is not on PATH here: submit from a login node, or "
                     "use dry_run=true to see the scripts")
        elif conf and not os.path.exists(conf):
            # SLURM's tools look for a missing configuration file for 60 s before they give up
            if not dry_run:
                fail(f"SLURM_CONF: {conf} does not exist: point it at the cluster's slurm.conf, or unset it to use "
                     f"the installed one")
            unchecked = f"not checked by a scheduler (SLURM_CONF: {conf} does not exist)"
        else:
            # The scheduler's own check of the job (partition, account, node count, resources), before the stage
            # prepares anything and before a job exists; a dry run's too, where a scheduler answers.
            check = subprocess.run(["sbatch", "--test-only"], input=sbatch_script(self.params, str(sweep_dir)),
                                   capture_output=True, text=True, timeout=120)
            said = check.stderr + check.stdout
            if check.returncode != 0 and (not dry_run or refused_option(said)):
                fail(refusal(said, self.params))
            unchecked = (f"not checked by a scheduler ({said.strip().splitlines()[-1] if said.strip() else 'sbatch failed'})"
                         if check.returncode != 0 else "")
        if stage is not None:
            with said_in_one_line():
                job_overrides = [self._prepared(stage, config, list(overrides), dry_run)
                                 for config, overrides in zip(configs, job_overrides)]
        job_dirs = [self._job_dir(config) for config in configs] or [sweep_dir] * len(job_overrides)
        if dry_run:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            returns = []
            for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
                path = sweep_dir / f"sbatch_{idx}.sh"
                path.write_text(sbatch_script(self.params, str(sweep_dir / ".submitit")))
                print(f"dry run: #{idx} {shown(overrides)}: its sbatch script {path}, run dir "
                      f"{job_dirs[idx - initial_job_idx]}; nothing submitted{'; ' + unchecked if unchecked else ''}",
                      flush=True)
                returns.append(JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED,
                                         _return_value=str(path), working_dir=str(sweep_dir)))
            return returns
        jobs = self._submit(job_overrides, initial_job_idx, sweep_dir)
        for idx, (job, overrides, job_dir) in enumerate(zip(jobs, job_overrides, job_dirs), start=initial_job_idx):
            log_path = job.paths.stderr
            print(f"#{idx} {shown(overrides)}: SLURM job {job.job_id} submitted; run dir "
                  f"{job_dir}; its log {log_path} (follow: tail -f {log_path}; cancel: scancel {job.job_id})",
                  flush=True)
        if not wait:
            return [JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, working_dir=str(job_dir),
                              _return_value={"job_id": job.job_id, "log": str(job.paths.stderr)})
                    for job, overrides, job_dir in zip(jobs, job_overrides, job_dirs)]
        return self._wait(jobs)

    def _job_dir(self, config: DictConfig) -> Path:
        """Where a job runs: its sweep dir and subdir, as its own config resolves them."""
        from hydra.core.hydra_config import HydraConfig

        hydra, launching = HydraConfig.instance(), HydraConfig.instance().cfg
        hydra.set_config(config)
        try:
            return Path(os.path.abspath(os.path.join(str(config.hydra.sweep.dir), str(config.hydra.sweep.subdir))))
        finally:
            hydra.cfg = launching

    def _submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, sweep_dir: Path) -> list:
        """Submit the jobs as one array (submitit's executor, with this launcher as the job's callable); their
        submitit jobs, in order."""
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

        executor = submitit.AutoExecutor(cluster="slurm", folder=self.params["submitit_folder"],
                                         slurm_max_num_timeout=self.params["max_num_timeout"])
        shared = set(OmegaConf.structured(BaseQueueConf).keys())  # submitit's names for every executor
        executor.update_parameters(**{
            key if key in shared else f"slurm_{key}": value for key, value in self.params.items()
            if key not in ("submitit_folder", "max_num_timeout", "dry_run", "wait")})
        sweep_dir.mkdir(parents=True, exist_ok=True)
        jobs = [(list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state())
                for idx, overrides in enumerate(job_overrides, start=initial_job_idx)]
        return executor.map_array(self, *zip(*jobs))

    def _wait(self, jobs: list) -> list[JobReturn]:
        """The jobs' results as they end (``wait=true``). Stopping the wait (Ctrl-C, SIGTERM) leaves the jobs
        running and says how to cancel them, in one line."""
        from submitit.core.utils import UncompletedJobError

        def stop(signum, frame):
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            return [job.results()[0] for job in jobs]
        except KeyboardInterrupt:
            ids = " ".join(dict.fromkeys(job.job_id.split("_")[0] for job in jobs))
            say_error(f"stopped waiting; the SLURM job {ids} goes on (its log: {jobs[0].paths.stderr}; cancel: "
                      f"scancel {ids})")
            raise SystemExit(128 + signal.SIGINT) from None
        except UncompletedJobError as exc:  # failed, cancelled, killed, or requeued too often
            fail(unfinished(str(exc)))
        finally:
            signal.signal(signal.SIGTERM, previous)


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


def refused_option(stderr: str) -> str | None:
    """The launcher option sbatch's refusal is about, or None (no refusal of the job's options: no scheduler)."""
    said = stderr.lower()
    return next((key for word, key in REFUSED if word in said), None)


def refusal(stderr: str, params: dict) -> str:
    """sbatch's refusal in one line, naming the launcher option it is about."""
    lines = [line.removeprefix("sbatch: error: ").strip() for line in stderr.splitlines() if line.strip()]
    reason = lines[-1].removeprefix("allocation failure: ") if lines else "no reason given"
    key = refused_option(stderr)
    option = f"hydra.launcher.{key}={params.get(key)}" if key else "the job's options"
    return f"sbatch refused the job ({option}): {reason}"


ConfigStore.instance().store(group="hydra/launcher", name="olmocr_slurm", node=OlmocrSlurmConf,
                             provider="olmocr")
