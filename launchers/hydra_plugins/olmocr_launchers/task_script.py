"""The shell script a cluster task runs: the same stage with the same overrides and ``cluster=local``,
wrapped in what the stage declares it needs (:class:`olmocr.cli.Launch`) on the task's resources.

- a stage that is not distributed: ``python -m <stage> …`` once per replica, whatever its GPUs (it uses
  them itself, a pipeline worker through its model server, say); replicas are independent workers;
- a distributed stage (training) on one GPU (or none): ``python -m <stage> …``; on several GPUs of one
  machine: ``torchrun --standalone --nproc_per_node=G``; on several replicas: one job over all of them, a
  static torchrun rendezvous at the leader replica (``BEAKER_LEADER_REPLICA_HOSTNAME``,
  ``BEAKER_REPLICA_RANK``);
- a sidecar server (the GRPO server layout), for R replicas of G GPUs: the leader's first S GPUs run the
  server (GRPO: ``trl vllm-serve``, S = its tensor x data parallel size); GPUs S..G-1 of *every* replica
  run the stage as one job of R x (G - S) processes (torchrun, ranks numbered from the leader, so rank 0,
  the only process that talks to the server, runs beside it). trl 1.16 talks to one server, and a job
  needs the same number of processes on each machine, so the first S GPUs of the other replicas stay idle;
- a persistent run dir: with ``sync_to``, the run dir is first restored from there (a retried or
  re-submitted task resumes from its newest complete checkpoint), the leader checks it can write there
  (the task ends at once if not), then pushed every ``sync_every``
  seconds while the stage runs and once more at exit, also on failure (``python -m olmocr.utils.sync``;
  a checkpoint is only ever taken for complete once its marker file arrived, so a killed upload is
  never resumed from).
"""

import shlex

from olmocr.cli import Sidecar
from olmocr.errors import UserError

LEADER, RANK = "$BEAKER_LEADER_REPLICA_HOSTNAME", "$BEAKER_REPLICA_RANK"


def stage_command(module: str, overrides: list[str], run_dir: str) -> list[str]:
    """The stage's arguments after ``python -m`` (or a launcher's ``-m``)."""
    kept = [o for o in overrides if not o.startswith(("cluster=", "hydra.run.dir=", "hydra.sweep.dir="))]
    return [module, *kept, "cluster=local", f"hydra.run.dir={run_dir}"]


def processes(gpus: int, replicas: int, sidecar: Sidecar | None = None) -> int:
    """The processes of a distributed job (its torch.distributed world) on ``replicas`` of ``gpus`` each: one
    per GPU (one on a replica without), less the GPUs the ``sidecar`` server takes on each replica."""
    per_replica = max(gpus, 1) if sidecar is None else gpus - sidecar.gpus
    if per_replica < 1:
        raise UserError(f"the server beside the stage takes {sidecar.gpus} GPU(s) (GRPO: its tensor x data parallel "
                        f"size): the stage needs more beside it; hydra.launcher.gpus is {gpus}")
    return per_replica * replicas


def _gpus(first: int, last: int) -> str:
    return ",".join(str(i) for i in range(first, last))


def _launch(stage: str, processes: int, replicas: int, port: int) -> str:
    """Run ``-m <stage>`` as one job of ``processes`` per replica."""
    if replicas > 1:
        return (f"torchrun --nnodes={replicas} --node_rank={RANK} --nproc_per_node={processes} "
                f"--master_addr={LEADER} --master_port={port} -m {stage}")
    if processes > 1:
        return f"torchrun --standalone --nproc_per_node={processes} -m {stage}"
    return f"python -m {stage}"


def _sync(run_dir: str, remote: str, every: int) -> list[str]:
    run, remote = shlex.quote(run_dir), shlex.quote(remote.rstrip("/"))
    sync = "python -m olmocr.utils.sync"
    return [
        f"{sync} pull {remote} {run} || {{ echo 'olmocr: cannot restore the run dir from {remote}' >&2; exit 1; }}",
        # The leader keeps the persistent copy (other replicas write nothing the run needs back), once it has
        # shown it can: credentials that read but do not write would let a run go on for days uncopied.
        f'if [ "${{BEAKER_REPLICA_RANK:-0}}" = 0 ]; then {sync} check {remote} || '
        f"{{ echo 'olmocr: cannot keep the run dir in {remote}' >&2; exit 1; }}; "
        f"{sync} push {run} {remote} --every {every} & sync_pid=$!; fi",
        'finish() { status=$?; if [ -n "${sync_pid:-}" ]; then kill -TERM "$sync_pid" 2>/dev/null; '
        "wait \"$sync_pid\" || echo 'olmocr: output sync failed' >&2; fi; exit $status; }",
        "trap finish EXIT",
    ]


def task_script(command: list[str], *, run_dir: str, gpus: int = 0, replicas: int = 1, distributed: bool = False,
                rendezvous_port: int = 29400, sidecar: Sidecar | None = None, sync_to: str | None = None,
                sync_every: int = 60, setup: list[str] | None = None) -> str:
    """A bash script running ``python -m <command>`` (e.g. :func:`stage_command`) on the task's GPUs, as one
    ``distributed`` job over them or once per replica, with the ``sidecar`` server beside it."""
    stage = " ".join(shlex.quote(a) for a in command)
    lines = ["set -uo pipefail", *(setup or [])]
    if sync_to:
        lines += _sync(run_dir, sync_to, sync_every)
    if sidecar is None:
        lines.append(_launch(stage, processes(gpus, 1), replicas, rendezvous_port) if distributed
                     else f"python -m {stage}")
        return "\n".join(lines) + "\n"
    trainers = processes(gpus, 1, sidecar)
    host = LEADER if replicas > 1 else "127.0.0.1"
    # Other replicas' processes reach the server on the leader's address.
    server = " ".join(shlex.quote(a) for a in sidecar.command("0.0.0.0" if replicas > 1 else "127.0.0.1"))
    lines += [
        f'if [ "${{BEAKER_REPLICA_RANK:-0}}" = 0 ]; then CUDA_VISIBLE_DEVICES={_gpus(0, sidecar.gpus)} {server} & '
        "server=$!; fi",
        # The stage waits until the server is healthy (GRPO: its algo.vllm.server_port already names the port).
        f"CUDA_VISIBLE_DEVICES={_gpus(sidecar.gpus, gpus)} "
        f"{_launch(stage, trainers, replicas, rendezvous_port)} {sidecar.host_key}={host}",
        "status=$?",
        'if [ -n "${server:-}" ]; then kill "$server" 2>/dev/null; fi',
        "exit $status",
    ]
    return "\n".join(lines) + "\n"
