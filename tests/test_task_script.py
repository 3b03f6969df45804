"""The script a cluster task runs, executed here: the same stage trains under torchrun on two processes,
across two "replicas" through a static rendezvous (GRPO in the server layout), and its outputs reach S3
even when it fails. (One process: tests/test_beaker.py runs a submitted spec's command.)"""

import json
import os
import socket
import subprocess
import sys

import pytest
from hydra_plugins.olmocr_launchers.task_script import stage_command, task_script

from olmocr.cli import Sidecar
from olmocr.config import PROJECT_ROOT

TINY = ["trainer.max_duration.value=2", "trainer.eval_interval=null", "checkpoint.interval=null",
        "data.steps.render.longest_side=256", "trainer.batch_size=2", "callbacks.plots=null"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_script(script: str, cache_dir: str, **env) -> subprocess.Popen:
    venv_bin = os.path.dirname(sys.executable)
    return subprocess.Popen(["bash", "-c", script], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}",
                                            "OLMOCR_CACHE": cache_dir, **env})


def samples_per_step(run_dir) -> list[int]:
    return [json.loads(line)["train/samples"] for line in open(os.path.join(run_dir, "metrics.jsonl"))]


@pytest.mark.integration
def test_several_gpus_of_one_machine_are_one_torchrun_job(tmp_path, cache_dir):
    run_dir = tmp_path / "double"
    script = task_script(stage_command("olmocr.train", TINY + ["cluster=slurm"], str(run_dir)), run_dir=str(run_dir),
                         gpus=2, distributed=True)
    assert "torchrun --standalone --nproc_per_node=2 -m olmocr.train" in script
    proc = run_script(script, cache_dir)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert samples_per_step(run_dir) == [4, 4]  # two ranks
    overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "cluster=local" in overrides and "cluster=slurm" not in overrides  # the task runs where it is


@pytest.mark.integration
def test_outputs_are_synced_also_on_failure(tmp_path, cache_dir, s3_server):
    import boto3

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="runs")
    run_dir = tmp_path / "run"
    script = task_script(stage_command("olmocr.train", TINY + ["data.train.synth.roots=[/nonexistent]"], str(run_dir)),
                         run_dir=str(run_dir), sync_to="s3://runs/exp1/")
    proc = run_script(script, cache_dir)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "error:" in err  # the stage's own exit status is kept
    assert "push " in out and " copied" in out
    keys = {o["Key"] for o in boto3.client("s3", endpoint_url=s3_server).list_objects_v2(Bucket="runs")["Contents"]}
    assert "exp1/.hydra/config.yaml" in keys


def test_a_sync_target_that_refuses_writes_ends_the_task_before_its_stage(tmp_path, cache_dir, s3_server):
    """Read-only credentials for sync_to: the restore works, the write check does not, and the stage never
    starts (a run would otherwise train for days with no copy kept)."""
    import boto3

    from support.faultproxy import FaultProxy

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="runs")
    run_dir = tmp_path / "run"
    script = task_script(stage_command("olmocr.train", TINY, str(run_dir)), run_dir=str(run_dir),
                         sync_to="s3://runs/exp1/")
    with FaultProxy(s3_server, rate=1.0, faults=("access_denied",), methods=("PUT", "POST", "DELETE")) as proxy:
        proc = run_script(script, cache_dir, AWS_ENDPOINT_URL=proxy.endpoint)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert err.splitlines() == ["error: cannot write to s3://runs/exp1 (and remove what was written): "
                                "s3://runs/exp1/.olmocr_sync_check: the storage refused the credentials "
                                "(PermissionError: Access Denied)", "olmocr: cannot keep the run dir in s3://runs/exp1"]
    assert not (run_dir / ".hydra").exists()


def vllm(gpus: int = 1) -> Sidecar:
    return Sidecar(command=lambda host: ["trl", "vllm-serve", "--model", "m", "--host", host], gpus=gpus,
                   host_key="algo.vllm.server_host")


def test_grpo_server_layout():
    script = task_script(stage_command("olmocr.train", ["+experiment=grpo_qwen25"], "/results/run"),
                         run_dir="/results/run", gpus=8, distributed=True, sidecar=vllm())
    lines = script.splitlines()
    assert ('if [ "${BEAKER_REPLICA_RANK:-0}" = 0 ]; then CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model m --host '
            "127.0.0.1 & server=$!; fi") in lines
    launch = next(line for line in lines if "-m olmocr.train" in line)
    assert launch.startswith("CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7 torchrun --standalone --nproc_per_node=7 -m olmocr.train")
    assert launch.endswith("+experiment=grpo_qwen25 cluster=local hydra.run.dir=/results/run algo.vllm.server_host=127.0.0.1")
    # a server of tensor x data parallel 4 takes GPUs 0-3
    launch = next(line for line in task_script(["olmocr.train"], run_dir="/r", gpus=8, distributed=True,
                                               sidecar=vllm(4)).splitlines() if "-m olmocr.train" in line)
    assert launch.startswith("CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --standalone --nproc_per_node=4 ")
    with pytest.raises(ValueError, match="the server beside the stage takes 1 GPU"):
        task_script(["olmocr.train"], run_dir="/r", gpus=1, distributed=True, sidecar=vllm())


@pytest.mark.integration
def test_grpo_server_layout_across_two_replicas(tmp_path, cache_dir):
    """Two replicas of 2 "GPUs": the leader's first serves (a stand-in here: the server layout's weight sync
    needs CUDA, so the trainers generate with transformers; test_vllm runs the real server), the other of each
    trains, and both trainers are one job."""
    port = free_port()
    marker = tmp_path / "server_started"
    stand_in = [sys.executable, "-c", f"import time; open({str(marker)!r}, 'a').write('x'); time.sleep(600)"]
    procs = []
    for rank in (0, 1):
        run_dir = str(tmp_path / f"replica{rank}")
        command = stage_command("olmocr.train", ["+experiment=grpo_tiny", "trainer.max_duration.value=2",
                                                 "checkpoint.interval=null", "callbacks.plots=null"], run_dir)
        sidecar = Sidecar(command=lambda host: stand_in, gpus=1, host_key="algo.vllm.server_host")
        script = task_script(command, run_dir=run_dir, gpus=2, replicas=2, distributed=True, rendezvous_port=port,
                             sidecar=sidecar)
        assert "--nnodes=2 --node_rank=$BEAKER_REPLICA_RANK --nproc_per_node=1" in script
        assert "algo.vllm.server_host=$BEAKER_LEADER_REPLICA_HOSTNAME" in script
        procs.append(run_script(script, cache_dir, BEAKER_REPLICA_RANK=str(rank),
                                BEAKER_LEADER_REPLICA_HOSTNAME="127.0.0.1"))
    for proc in procs:
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-3000:]
    rows = [json.loads(line) for line in open(tmp_path / "replica0" / "metrics.jsonl")]
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [2]  # the bench eval, the pages shared by both trainers
    rows = [r for r in rows if r["kind"] == "train"]
    # one job: each step takes a page per trainer (two of 32), and only rank 0 (on the leader) writes
    assert [round(r["train/epoch"], 4) for r in rows] == [0.0625, 0.125]
    assert not (tmp_path / "replica1" / "metrics.jsonl").exists()
    assert marker.read_text() == "x"  # the server ran on the leader only, and was stopped with the job
    overrides = (tmp_path / "replica1" / ".hydra" / "overrides.yaml").read_text()
    assert "algo.vllm.server_host=127.0.0.1" in overrides  # the leader's address, on every replica
