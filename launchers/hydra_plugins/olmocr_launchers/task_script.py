"""The shell script a cluster task runs: the same stage with the same overrides and ``cluster=local``,
wrapped in what its resources need.

- one GPU (or none): ``python -m <stage> …``;
- several GPUs on one machine: ``torchrun --standalone --nproc_per_node=G``;
- several replicas: a static torchrun rendezvous on the leader replica (``BEAKER_LEADER_REPLICA_HOSTNAME``,
  ``BEAKER_REPLICA_RANK``);
- the GRPO server layout: GPU 0 runs ``trl vllm-serve``; the other GPUs train under accelerate (the stage
  waits until the server is healthy);
- outputs: the run dir is copied to ``sync_to`` when the script exits, also when it fails.
"""

import shlex


def stage_command(module: str, overrides: list[str], run_dir: str) -> list[str]:
    """The stage's arguments after ``python -m`` (or a launcher's ``-m``)."""
    kept = [o for o in overrides if not o.startswith(("cluster=", "hydra.run.dir=", "hydra.sweep.dir="))]
    return [module, *kept, "cluster=local", f"hydra.run.dir={run_dir}"]


def task_script(command: list[str], *, run_dir: str, gpus: int = 0, replicas: int = 1,
                rendezvous_port: int = 29400, vllm_server: list[str] | None = None, sync_to: str | None = None, setup: list[str] | None = None) -> str:
    """A bash script running ``python -m <command>`` (e.g. :func:`stage_command`) on the task's GPUs;
    ``vllm_server`` (the server's command) selects the GRPO server layout."""
    stage = " ".join(shlex.quote(a) for a in command)
    lines = ["set -uo pipefail"]
    if sync_to:
        target = shlex.quote(sync_to.rstrip("/"))
        lines += [f"finish() {{ status=$?; python -m olmocr.utils.sync {shlex.quote(run_dir)} {target} "
                  "|| echo 'olmocr: output sync failed' >&2; exit $status; }", "trap finish EXIT"]
    lines += list(setup or [])
    if vllm_server is not None:
        if gpus < 2:
            raise ValueError("the GRPO server layout needs at least 2 GPUs: one serves, the others train")
        trainers = ",".join(str(i) for i in range(1, gpus))
        lines += [
            "CUDA_VISIBLE_DEVICES=0 " + " ".join(shlex.quote(a) for a in vllm_server) + " &",
            "server=$!",
            # The server runs in this task; the stage's own algo.vllm_server_port already names its port.
            f"CUDA_VISIBLE_DEVICES={trainers} accelerate launch --num_processes {gpus - 1} -m {stage} "
            "algo.vllm_server_host=127.0.0.1",
            "status=$?",
            "kill $server 2>/dev/null",
            "exit $status",
        ]
    elif replicas > 1:
        lines.append(f"torchrun --nnodes={replicas} --node_rank=$BEAKER_REPLICA_RANK --nproc_per_node={max(gpus, 1)} "
                     f"--master_addr=$BEAKER_LEADER_REPLICA_HOSTNAME --master_port={rendezvous_port} -m {stage}")
    elif gpus > 1:
        lines.append(f"torchrun --standalone --nproc_per_node={gpus} -m {stage}")
    else:
        lines.append(f"python -m {stage}")
    return "\n".join(lines) + "\n"
