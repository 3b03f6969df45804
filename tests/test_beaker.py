"""The Beaker launcher: the specs it would submit, with the Beaker service faked at the client only
(real beaker-py spec and protobuf types), the checks before submitting, and the task command run here."""

import os
import subprocess
import sys

import pytest
import yaml
from beaker import beaker_pb2 as pb
from beaker.exceptions import BeakerSecretNotFound

from olmocr.config import PROJECT_ROOT

BASE = ["cluster=beaker", "hydra.launcher.workspace=ai2/olmocr", "hydra.launcher.budget=ai2/oe-base",
        "hydra.launcher.image=me/olmocr", "hydra.launcher.require_clean_git=false"]


class FakeBeaker:
    """beaker.Beaker at its API surface, with real protobuf types. It records what would be submitted;
    with ``run=True`` it also runs each task's command here, as a one-node Beaker would (environment from
    the spec, secrets by name, the result path as the result dataset); otherwise it plays back logs and
    ``exit_code``."""

    def __init__(self, secrets=("wandb_key",), exit_code=0, run=False):
        self.created, self.secrets, self.exit_code, self.run = [], set(secrets), exit_code, run
        self.outcomes: dict[str, tuple[int, bytes, str]] = {}  # workload id -> exit code, log, result path
        fake = self

        class Experiments:
            def create(self, *, spec, name=None, workspace=None):
                fake.created.append((name, spec))
                workload_id = f"01EXP{len(fake.created)}"
                task = spec.tasks[0]
                if fake.run:
                    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
                    env.update({e.name: e.value if e.value is not None else f"secret:{e.secret}" for e in task.env_vars})
                    proc = subprocess.run(task.command, cwd=PROJECT_ROOT, env=env, capture_output=True, timeout=600)
                    fake.outcomes[workload_id] = (proc.returncode, proc.stdout + proc.stderr, task.result.path)
                else:
                    fake.outcomes[workload_id] = (fake.exit_code, b"step 1/2 loss 6.9\ndone\n", "")
                return pb.Workload(experiment=pb.Experiment(id=workload_id, name=name))

            def url(self, workload):
                return f"https://beaker.org/ex/{workload.experiment.id}"

        class Secrets:
            def get(self, name, *, workspace=None):
                if name not in fake.secrets:
                    raise BeakerSecretNotFound(name)
                return pb.Secret(name=name)

        class Workloads:
            def get_latest_job(self, workload, *, task=None, finalized=None):
                return pb.Job(id=workload.experiment.id)

        class Jobs:
            def logs(self, job, *, tail_lines=None, follow=None, since=None):
                return [pb.JobLog(message=line + b"\n") for line in fake.outcomes[job.id][1].splitlines()]

            def get(self, job_id):
                return pb.Job(id=job_id, status=pb.JobStatus(exit_code=fake.outcomes[job_id][0]))

            def get_results(self, job):
                path = fake.outcomes[job.id][2]
                return pb.Dataset(id=path) if path else None

        class Datasets:
            def stream_file(self, dataset, file_path, **_):
                with open(os.path.join(dataset.id, file_path), "rb") as fh:
                    yield fh.read()

        self.experiment, self.secret, self.workload, self.job = Experiments(), Secrets(), Workloads(), Jobs()
        self.dataset = Datasets()


def launch(monkeypatch, tmp_path, overrides, fake=None, module="olmocr.synth"):
    """Run a stage as `python -m <module> -m …` does, in this process, with the Beaker client replaced."""
    import importlib

    import beaker
    from hydra._internal.utils import _run_hydra, get_args_parser

    from olmocr.config import CONF_DIR

    if fake is not None:
        monkeypatch.setattr(beaker.Beaker, "from_env", classmethod(lambda cls, **kw: fake))
    task_function = importlib.import_module(f"{module}.__main__").main.__wrapped__
    parser = get_args_parser()
    args = parser.parse_args(["-m", *BASE, *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    config_name = {"olmocr.synth": "synth", "olmocr.train": "train"}[module]
    _run_hydra(args=args, args_parser=parser, task_function=task_function, config_path=CONF_DIR,
               config_name=config_name)


def specs(tmp_path):
    return {str(p.relative_to(tmp_path / "sweep")): yaml.safe_load(p.read_text())
            for p in sorted((tmp_path / "sweep").rglob("beaker_spec.yaml"))}


def test_sweep_submits_one_experiment_per_job(monkeypatch, tmp_path):
    fake = FakeBeaker()
    monkeypatch.setenv("WANDB_API_KEY", "value-that-must-not-leak")
    launch(monkeypatch, tmp_path, ["seed=1,2", "hydra.launcher.gpus=0", "+hydra.launcher.secrets.WANDB_API_KEY=wandb_key"],
           fake)
    names = [name for name, _ in fake.created]
    assert len(names) == 2 and len(set(names)) == 2 and all(n.startswith("olmocr-synth-") for n in names)
    for (_, spec), seed in zip(fake.created, (1, 2)):
        task = spec.tasks[0]
        script = task.command[2]
        assert task.command[:2] == ["bash", "-c"]
        assert f"python -m olmocr.synth seed={seed} cluster=local hydra.run.dir=/results/run" in script
        assert spec.description == f"python -m olmocr.synth seed={seed}"
        assert {(e.name, e.secret) for e in task.env_vars if e.secret} == {("WANDB_API_KEY", "wandb_key")}
    for text in (p.read_text() for p in (tmp_path / "sweep").rglob("*") if p.is_file()):
        assert "value-that-must-not-leak" not in text


def test_spec_resources_replicas_mounts_and_retries(monkeypatch, tmp_path):
    launch(monkeypatch, tmp_path, [
        "hydra.launcher.dry_run=true", "hydra.launcher.gpus=8", "hydra.launcher.replicas=2",
        "hydra.launcher.clusters=[ai2/jupiter,ai2/ceres]", "hydra.launcher.priority=high",
        "hydra.launcher.preemptible=false", "hydra.launcher.retries=3", "hydra.launcher.shared_memory=64GiB",
        "+hydra.launcher.weka.oe-training-default=/weka/oe-training-default", "+hydra.launcher.env.NCCL_DEBUG=WARN",
        "hydra.launcher.sync_to=s3://bucket/runs"], module="olmocr.train")
    (spec,) = specs(tmp_path).values()
    task = spec["tasks"][0]
    assert task["image"] == {"beaker": "me/olmocr"}
    assert task["resources"] == {"gpuCount": 8, "sharedMemory": "64GiB"}
    assert task["replicas"] == 2 and task["leaderSelection"] and task["hostNetworking"] and task["propagateFailure"]
    assert task["constraints"] == {"cluster": ["ai2/jupiter", "ai2/ceres"]}
    assert task["context"] == {"priority": "high", "preemptible": False}
    assert task["datasets"] == [{"mountPath": "/weka/oe-training-default", "source": {"weka": "oe-training-default"}}]
    assert spec["retry"] == {"allowedTaskRetries": 3} and spec["budget"] == "ai2/oe-base"
    assert {"name": "NCCL_DEBUG", "value": "WARN"} in task["envVars"]
    script = task["command"][2]
    assert ("torchrun --nnodes=2 --node_rank=$BEAKER_REPLICA_RANK --nproc_per_node=8 "
            "--master_addr=$BEAKER_LEADER_REPLICA_HOSTNAME --master_port=29400 -m olmocr.train") in script
    assert "python -m olmocr.utils.sync /results/run s3://bucket/runs/olmocr-train-" in script


def test_grpo_server_layout_spec(monkeypatch, tmp_path):
    launch(monkeypatch, tmp_path, ["+experiment=grpo_qwen25", "hydra.launcher.dry_run=true", "hydra.launcher.gpus=8",
                                   "algo.vllm_server_port=8123"], module="olmocr.train")
    (spec,) = specs(tmp_path).values()
    script = spec["tasks"][0]["command"][2]
    # The server listens where the trainers' config looks for it.
    assert "CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model Qwen/Qwen2.5-VL-7B-Instruct --host 127.0.0.1 --port 8123" in script
    assert "algo.vllm_server_port=8123" in script and "algo.vllm_server_port=8000" not in script
    assert "CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7 accelerate launch --num_processes 7 -m olmocr.train" in script


def test_follow_reports_the_exit_code(monkeypatch, tmp_path, capfd):
    from hydra_plugins.olmocr_launchers.beaker import BeakerLauncher

    returns = {}
    original = BeakerLauncher.launch

    def keep(self, job_overrides, initial_job_idx):
        returns["jobs"] = original(self, job_overrides, initial_job_idx)
        return returns["jobs"]

    monkeypatch.setattr(BeakerLauncher, "launch", keep)
    with pytest.raises(SystemExit):  # Hydra exits non-zero when a job failed
        launch(monkeypatch, tmp_path, ["hydra.launcher.follow=true"], FakeBeaker(exit_code=1))
    (job,) = returns["jobs"]
    assert job.status.name == "FAILED" and "exited with code 1" in str(job._return_value)
    assert "step 1/2 loss 6.9" in capfd.readouterr().out  # the job's log, streamed
    returns.clear()
    launch(monkeypatch, tmp_path, ["hydra.launcher.follow=true"], FakeBeaker(exit_code=0))
    (job,) = returns["jobs"]
    assert job.status.name == "COMPLETED" and job.return_value["exit_code"] == 0
    assert job.return_value["url"].startswith("https://beaker.org/ex/01EXP")


def cli(tmp_path, overrides, env=None, cwd=PROJECT_ROOT):
    return subprocess.run([sys.executable, "-m", "olmocr.synth", *BASE, *overrides, f"hydra.sweep.dir={tmp_path}/s"],
                          cwd=cwd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_clear_errors_before_submitting(monkeypatch, tmp_path, capfd):
    env = {"BEAKER_TOKEN": "", "HOME": str(tmp_path)}  # no token, no ~/.beaker config
    proc = cli(tmp_path, [], env=env)
    assert proc.returncode != 0 and "Beaker credentials: set BEAKER_TOKEN" in proc.stderr
    fake = FakeBeaker()
    with pytest.raises(SystemExit):  # Hydra reports the error and exits 1
        launch(monkeypatch, tmp_path, ["+hydra.launcher.secrets.HF_TOKEN=nope"], fake)
    assert "hydra.launcher.secrets.HF_TOKEN: Beaker secret 'nope' does not exist" in capfd.readouterr().err
    assert fake.created == []
    proc = cli(tmp_path, ["hydra.launcher.budget=null", "hydra.launcher.dry_run=true"])
    assert proc.returncode == 2 and proc.stderr == "error: hydra.launcher.budget: required to submit to Beaker\n"
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "untracked.txt").write_text("x")
    monkeypatch.chdir(repo)
    with pytest.raises(SystemExit):
        launch(monkeypatch, tmp_path, ["hydra.launcher.require_clean_git=true"], fake)
    assert "the git tree has uncommitted changes" in capfd.readouterr().err and fake.created == []


def test_the_task_command_trains_here(monkeypatch, tmp_path, cache_dir):
    """The spec's command, run as it is (bash -c …) with the result path on local disk: it trains."""
    launch(monkeypatch, tmp_path, ["hydra.launcher.dry_run=true", "hydra.launcher.gpus=0",
                                   f"hydra.launcher.result_path={tmp_path / 'results'}",
                                   "trainer.max_duration.value=2", "trainer.eval_interval=null",
                                   "trainer.save_interval=2", "data.steps.render.longest_side=256"],
           module="olmocr.train")
    (spec,) = specs(tmp_path).values()
    command = spec["tasks"][0]["command"]
    venv_bin = os.path.dirname(sys.executable)
    proc = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}", "OLMOCR_CACHE": cache_dir})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "results" / "run" / "checkpoints" / "step_000002" / "model" / "model.safetensors").exists()
