"""Hooks into submitit's internals (as pinned), for the SLURM launcher (``hydra_plugins.olmocr_launchers.slurm``)."""

from __future__ import annotations

from collections.abc import Callable

from olmocr.private import Hook

HOOKS = {
    "sbatch_script": Hook(
        "submitit.SlurmExecutor._make_submission_file_text", ("self", "command", "uid"),
        "a dry run shows the sbatch script a job would get, and submitit writes it only while submitting"),
    "launcher_parameters": Hook(
        "submitit.SlurmExecutor._convert_parameters", ("self", "params"),
        "the launcher's keys use submitit's shared names (timeout_min, tasks_per_node), which only this maps to "
        "SLURM's"),
    "requeue_with": Hook(
        "submitit.slurm.slurm.SlurmJobEnvironment._requeue", ("self", "countdown"),
        "submitit runs scontrol requeue itself on preemption, with no way to give it the command's signal handling"),
}


def sbatch_script(params: dict, folder: str) -> str:
    """The sbatch script submitit writes for one job with these launcher parameters (rendered here, without a
    scheduler: submitit's executor refuses to start where srun is missing)."""
    from submitit import SlurmExecutor

    class ScriptOnly(SlurmExecutor):
        @classmethod
        def affinity(cls) -> int:
            return 1

    executor = ScriptOnly(folder)
    executor.update_parameters(**executor._convert_parameters(params))
    return executor._make_submission_file_text(f"{executor.python} -u -m submitit.core._submit {folder}", "JOB")


def requeue_with(requeue: Callable[[object, int], None]) -> None:
    """submitit's requeue on preemption, inside the job, done by ``requeue(env, countdown)``."""
    from submitit.slurm.slurm import SlurmJobEnvironment

    SlurmJobEnvironment._requeue = requeue
