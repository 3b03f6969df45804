"""The Beaker launcher: the specs it would submit, with the Beaker service faked at the client only
(real beaker-py spec and protobuf types), the checks before submitting, and the task command run here."""

import os
import subprocess
import sys
import types

import pytest
import yaml
from beaker import beaker_pb2 as pb
from beaker.exceptions import BeakerSecretNotFound

import olmocr.pipeline.queue as wq
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

        class Users:
            def get(self):
                return pb.User(name="me")

        class Workspaces:
            def get(self, name):
                return pb.Workspace(name=name)

        class Service:  # the bare probe of the endpoint (answered: the endpoint is there)
            def GetUser(self, request, **_):  # noqa: N802 - the gRPC method's name
                return pb.GetUserResponse()

        self.experiment, self.secret, self.workload, self.job = Experiments(), Secrets(), Workloads(), Jobs()
        self.dataset, self.user, self.workspace, self.service = Datasets(), Users(), Workspaces(), Service()
        self.config = types.SimpleNamespace(rpc_address="beaker.org:443")


def launch(monkeypatch, tmp_path, overrides, fake=None, module="olmocr.synth"):
    """Run a stage as `python -m <module> -m …` does, in this process, with the Beaker client replaced."""
    import beaker
    from hydra._internal.utils import _run_hydra, get_args_parser

    from olmocr.cli import stages
    from olmocr.config import CONF_DIR

    if fake is not None:
        monkeypatch.setattr(beaker.Beaker, "from_env", classmethod(lambda cls, **kw: fake))
    stage = stages()[module]
    parser = get_args_parser()
    args = parser.parse_args(["-m", *BASE, *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    _run_hydra(args=args, args_parser=parser, task_function=stage.task, config_path=CONF_DIR, config_name=stage.config)


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


def test_a_stage_module_submits_like_a_stage_package(monkeypatch, tmp_path):
    fake = FakeBeaker()
    launch(monkeypatch, tmp_path, ["sources=[s3://b/runs/seed1,s3://b/runs/seed2]", "output=s3://b/souped",
                                   "hydra.launcher.gpus=0"], fake, module="olmocr.prepare")
    ((name, spec),) = fake.created
    assert name.startswith("olmocr-prepare-")
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    line = next(line for line in spec.tasks[0].command[2].splitlines() if line.startswith("python -m"))
    args = shlex.split(line)
    assert args[:3] == ["python", "-m", "olmocr.prepare"]
    values = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(args[3:])}
    assert values["sources"] == ["s3://b/runs/seed1", "s3://b/runs/seed2"] and values["output"] == "s3://b/souped"
    assert values["cluster"] == "local" and values["hydra.run.dir"] == "/results/run"


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
    # The run's place follows its local run dir, so the same command finds the same run again.
    remote = f"s3://bucket/runs/{(tmp_path / 'sweep').as_posix().lstrip('/')}"
    assert f"python -m olmocr.utils.sync pull {remote} /results/run || " in script
    assert f"python -m olmocr.utils.sync push /results/run {remote} --every 60 &" in script


def test_preemptible_training_needs_a_persistent_run_dir(monkeypatch, tmp_path, capfd):
    with pytest.raises(SystemExit):
        launch(monkeypatch, tmp_path, ["hydra.launcher.dry_run=true"], module="olmocr.train")
    assert capfd.readouterr().err == ("error: a preemptible olmocr.train job would start over when preempted: "
                                      "set hydra.launcher.sync_to=s3://… (checkpoints pushed as they are written) or "
                                      "hydra.launcher.run_root=<a mounted Weka path>, or hydra.launcher.preemptible=false\n")
    # on a mounted persistent folder, the run dir is there (and nothing is synced); retries default to 3
    launch(monkeypatch, tmp_path, ["hydra.launcher.dry_run=true", "hydra.launcher.run_root=/weka/runs"],
           module="olmocr.train")
    (spec,) = specs(tmp_path).values()
    script = spec["tasks"][0]["command"][2]
    assert f"hydra.run.dir=/weka/runs/{(tmp_path / 'sweep').as_posix().lstrip('/')}" in script
    assert "olmocr.utils.sync" not in script and spec["retry"] == {"allowedTaskRetries": 3}
    # several replicas of DeepSpeed write optimizer shards on each machine: only a shared folder keeps them all
    with pytest.raises(SystemExit):
        launch(monkeypatch, tmp_path, ["hydra.launcher.dry_run=true", "hydra.launcher.replicas=2",
                                       "hydra.launcher.sync_to=s3://b/r", "strategy=deepspeed"],
               module="olmocr.train")
    assert "with several replicas use hydra.launcher.run_root" in capfd.readouterr().err


def test_replicas_of_a_stage_that_is_not_distributed_are_independent_workers(monkeypatch, tmp_path, capfd):
    """The pipeline declares no distributed job: one experiment whose replicas each run the stage once, on
    all their GPUs, with no rendezvous to wait for (a preempted replica leaves the others working). Its
    PDFs are queued once, here, before the experiment is created; the replicas only work."""
    from conftest import write_pdf
    from olmocr.pipeline.workspace import Workspace

    workspace = str(tmp_path / "ws")  # a folder every replica mounts
    pdfs = [write_pdf(str(tmp_path / f"{n}.pdf"), [n]) for n in ("a", "b")]
    overrides = [f"workspace={workspace}", f"pdfs=[{','.join(pdfs)}]", "pages_per_group=1", "hydra.launcher.gpus=4",
                 "hydra.launcher.replicas=4", "workers=8"]
    launch(monkeypatch, tmp_path, ["hydra.launcher.dry_run=true", *overrides], module="olmocr.pipeline")
    (spec,) = specs(tmp_path).values()
    (task,) = spec["tasks"]
    assert task["replicas"] == 4 and task["resources"]["gpuCount"] == 4 and task["context"]["preemptible"]
    assert not any(task.get(key) for key in ("leaderSelection", "hostNetworking", "propagateFailure"))
    script = task["command"][2]
    assert "torchrun" not in script and "pdfs=" not in script
    assert (f"\npython -m olmocr.pipeline workspace={workspace} pages_per_group=1 workers=8 cluster=local "
            "hydra.run.dir=/results/run\n") in script
    assert not os.path.exists(workspace)  # a dry run changes nothing
    fake = FakeBeaker()
    launch(monkeypatch, tmp_path, overrides, fake, module="olmocr.pipeline")
    ((_, submitted),) = fake.created
    assert submitted.tasks[0].replicas == 4 and "pdfs=" not in submitted.tasks[0].command[2]
    assert sorted(p for item in wq.items(Workspace(workspace)) for p in item.pdfs) == pdfs
    assert "submitted: https://beaker.org/ex/01EXP1" in capfd.readouterr().out


@pytest.mark.parametrize("replicas, parallel, server_gpus, host", [
    (1, ["algo.vllm.data_parallel_size=1"], "0", "127.0.0.1"),
    (2, ["algo.vllm.data_parallel_size=2"], "0,1", "$BEAKER_LEADER_REPLICA_HOSTNAME"),
])
def test_grpo_server_layout_spec(monkeypatch, tmp_path, replicas, parallel, server_gpus, host):
    keep = "hydra.launcher.sync_to=s3://b/r" if replicas == 1 else "hydra.launcher.run_root=/weka/r"  # DeepSpeed
    launch(monkeypatch, tmp_path, ["+experiment=grpo_qwen25", "hydra.launcher.dry_run=true", "hydra.launcher.gpus=8",
                                   f"hydra.launcher.replicas={replicas}", keep,
                                   "algo.vllm.server_port=8123", *parallel], module="olmocr.train")
    (spec,) = specs(tmp_path).values()
    script = spec["tasks"][0]["command"][2]
    # The leader's first GPUs serve; the trainers' config looks for the server where it listens.
    bind = "0.0.0.0" if replicas > 1 else "127.0.0.1"
    assert (f'if [ "${{BEAKER_REPLICA_RANK:-0}}" = 0 ]; then CUDA_VISIBLE_DEVICES={server_gpus} trl vllm-serve --model '
            f"Qwen/Qwen2.5-VL-7B-Instruct --host {bind} --port 8123 --tensor-parallel-size 1 --data-parallel-size "
            f"{len(server_gpus.split(','))} --gpu-memory-utilization 0.5 --max-model-len 16384 & server=$!; fi") in script
    assert "algo.vllm.server_port=8123" in script and "algo.vllm.server_port=8000" not in script
    trainers = 8 - len(server_gpus.split(","))
    visible = ",".join(str(g) for g in range(8 - trainers, 8))
    launch_line = next(line for line in script.splitlines() if "-m olmocr.train" in line)
    if replicas == 1:
        assert launch_line.startswith(f"CUDA_VISIBLE_DEVICES={visible} torchrun --standalone --nproc_per_node={trainers} ")
    else:  # one job over both replicas, ranks from the leader, where the server is
        assert launch_line.startswith(
            f"CUDA_VISIBLE_DEVICES={visible} torchrun --nnodes=2 --node_rank=$BEAKER_REPLICA_RANK "
            f"--nproc_per_node={trainers} --master_addr=$BEAKER_LEADER_REPLICA_HOSTNAME --master_port=29400 ")
    assert launch_line.endswith(f" algo.vllm.server_host={host}")


def test_grpo_groups_must_split_over_the_processes_the_layout_gives(monkeypatch, tmp_path, capfd):
    # Only the launcher knows the processes; before, the job found out on its GPUs, after its wait in the queue.
    common = ["+experiment=grpo_qwen25", "hydra.launcher.dry_run=true", "hydra.launcher.gpus=8",
              "hydra.launcher.sync_to=s3://b/r", "trainer.grad_accum=4"]
    launch(monkeypatch, tmp_path, common, module="olmocr.train")  # 7 trainers beside a 1-GPU server: 28 completions
    assert len(specs(tmp_path)) == 1
    with pytest.raises(SystemExit):
        launch(monkeypatch, tmp_path, [*common, "algo.vllm.data_parallel_size=2"], module="olmocr.train")
    assert ("error: algo.num_generations=28 must divide the completions per step, trainer.batch_size × "
            "trainer.grad_accum × processes = 1 × 4 × 6 = 24 (batch_size counts completions)") in capfd.readouterr().err


def test_follow_reports_the_exit_code(monkeypatch, tmp_path, capfd):
    """A followed job's log is streamed; one that fails ends the command in one line with the job's own error."""
    launch(monkeypatch, tmp_path, ["wait=true"], FakeBeaker(exit_code=0))
    out = capfd.readouterr().out
    assert "submitted: https://beaker.org/ex/01EXP1" in out and "step 1/2 loss 6.9" in out  # the job's log, streamed

    with pytest.raises(SystemExit) as code:
        launch(monkeypatch, tmp_path, ["wait=true"], FakeBeaker(exit_code=1))
    assert code.value.code == 2
    assert capfd.readouterr().err.splitlines()[-1] == ("error: Beaker job 01EXP1 exited with code 1; "
                                                       "https://beaker.org/ex/01EXP1")
    (tmp_path / "a_file").write_text("")
    out_dir = tmp_path / "a_file" / "pages"
    with pytest.raises(SystemExit) as code:  # the job really runs here, and fails
        launch(monkeypatch, tmp_path, ["wait=true", f"out_dir={out_dir}"], FakeBeaker(run=True))
    err = capfd.readouterr().err
    assert code.value.code == 2 and err.splitlines()[-1] == (
        f"error: Beaker job 01EXP1 exited with code 2: out_dir={out_dir}: not a directory: {out_dir}; "
        "https://beaker.org/ex/01EXP1"), err[-2000:]


def cli(python, tmp_path, overrides, env=None, cwd=PROJECT_ROOT):
    return subprocess.run([python, "-m", "olmocr.synth", *BASE, *overrides, f"hydra.sweep.dir={tmp_path}/s"],
                          cwd=cwd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.mark.integration
def test_clear_errors_before_submitting(monkeypatch, tmp_path, capfd, warm_python):
    env = {"BEAKER_TOKEN": "", "HOME": str(tmp_path)}  # no token, no ~/.beaker config
    proc = cli(warm_python, tmp_path, [], env=env)
    assert proc.returncode != 0 and "Beaker credentials: set BEAKER_TOKEN" in proc.stderr
    fake = FakeBeaker()
    with pytest.raises(SystemExit):  # Hydra reports the error and exits 1
        launch(monkeypatch, tmp_path, ["+hydra.launcher.secrets.HF_TOKEN=nope"], fake)
    assert "hydra.launcher.secrets.HF_TOKEN: Beaker secret 'nope' does not exist" in capfd.readouterr().err
    assert fake.created == []
    with pytest.raises(SystemExit):  # each job's config, as the job will check it: the sweep's second is refused
        launch(monkeypatch, tmp_path, ["trainer.batch_size=2,0", "hydra.launcher.preemptible=false"], fake,
               module="olmocr.train")
    assert "error: trainer.batch_size: must be at least 1, got 0" in capfd.readouterr().err
    assert fake.created == []
    proc = cli(warm_python, tmp_path, ["hydra.launcher.budget=null", "hydra.launcher.dry_run=true"])
    assert proc.returncode == 2 and proc.stderr == "error: hydra.launcher.budget: required to submit to Beaker\n"
    for override, error in [("unreachable_s=-1", "unreachable_s: must be positive, got -1"),  # was taken as 0 s
                            ("priority=top", "priority: expected one of low, normal, high, urgent, immediate, got 'top'"),
                            ("rendezvous_port=70000", "rendezvous_port: must be in [1, 65535], got 70000")]:
        with pytest.raises(SystemExit):
            launch(monkeypatch, tmp_path, [f"hydra.launcher.{override}"], fake)
        assert f"error: hydra.launcher.{error}" in capfd.readouterr().err and fake.created == []
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a_tracked.txt").write_text("x")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "a_tracked.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    (repo / "a_tracked.txt").write_text("changed")  # git's first line " M a_tracked.txt": its name said whole
    (repo / "untracked.txt").write_text("x")
    monkeypatch.chdir(repo)
    with pytest.raises(SystemExit):
        launch(monkeypatch, tmp_path, ["hydra.launcher.require_clean_git=true"], fake)
    assert ("the git tree has uncommitted changes, which the job's image would not have: a_tracked.txt, "
            "untracked.txt; commit them" in capfd.readouterr().err) and fake.created == []


def test_every_problem_before_submitting_is_said_at_once(monkeypatch, tmp_path, capfd):
    """Three problems (a setting missing, a file not committed, a preemptible training job that would start over)
    were three tries: one line each, in one try, nothing written or submitted."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "notes.txt").write_text("x")
    monkeypatch.chdir(repo)
    fake = FakeBeaker()
    with pytest.raises(SystemExit) as code:
        launch(monkeypatch, tmp_path, ["hydra.launcher.budget=null", "hydra.launcher.require_clean_git=true"], fake,
               module="olmocr.train")
    assert code.value.code == 2 and fake.created == []
    assert capfd.readouterr().err.splitlines() == [
        "error: hydra.launcher.budget: required to submit to Beaker",
        "error: the git tree has uncommitted changes, which the job's image would not have: notes.txt; commit them "
        "(or set hydra.launcher.require_clean_git=false)",
        "error: a preemptible olmocr.train job would start over when preempted: set hydra.launcher.sync_to=s3://… "
        "(checkpoints pushed as they are written) or hydra.launcher.run_root=<a mounted Weka path>, or "
        "hydra.launcher.preemptible=false"]
    assert not specs(tmp_path)


def test_dry_run_true_is_the_launchers_dry_run(monkeypatch, tmp_path, capfd):
    """The stage's dry_run=true with a cluster writes the spec of the job as it would run (not a job that dry-runs
    the stage) and submits nothing; a run made here in the job dir is said to stay here."""
    (tmp_path / "sweep" / "checkpoints").mkdir(parents=True)  # a run made here, in the job's dir
    fake = FakeBeaker()
    launch(monkeypatch, tmp_path, ["dry_run=true", "hydra.launcher.sync_to=s3://b/r", "hydra.sweep.subdir=."], fake,
           module="olmocr.train")
    assert fake.created == []
    (spec,) = specs(tmp_path).values()
    script = spec["tasks"][0]["command"][2]
    assert "\npython -m olmocr.train cluster=local hydra.run.dir=/results/run\n" in script
    out, err = capfd.readouterr()
    assert f"dry run: #0 (no overrides): its spec {tmp_path / 'sweep' / 'beaker_spec.yaml'}; nothing submitted" in out
    key = (tmp_path / "sweep").as_posix().lstrip("/")
    assert err == (f"warning: {tmp_path / 'sweep'} holds a run made here, which the Beaker job cannot see: it goes on "
                   f"from what s3://b/r/{key} holds, or starts over\n")


def test_ctrl_c_while_following_leaves_the_job_and_says_where_it_is(monkeypatch, tmp_path, capfd):
    fake = FakeBeaker()

    def logs(job, **_):
        yield pb.JobLog(message=b"step 1/2 loss 6.9\n")
        raise KeyboardInterrupt

    fake.job.logs = logs
    with pytest.raises(SystemExit) as code:
        launch(monkeypatch, tmp_path, ["wait=true"], fake)
    assert code.value.code == 130 and len(fake.created) == 1
    out, err = capfd.readouterr()
    assert "step 1/2 loss 6.9" in out
    assert err == "error: stopped following; Beaker experiment 01EXP1 goes on: https://beaker.org/ex/01EXP1\n"


def test_a_refused_token_or_an_absent_service_is_one_line_before_anything_is_prepared(tmp_path, warm_python):
    """Against a Beaker endpoint at the network boundary (TLS, the real client): a refused token was a 30-line
    gRPC trace after the pipeline had queued its PDFs; an endpoint that is not there, a wait without end and
    without a word (the client retries it in its debug log)."""
    import grpc
    from beaker_endpoint import BeakerEndpoint

    pdfs = os.path.join(PROJECT_ROOT, "data", "sample", "eval", "pdfs")
    run = [warm_python, "-m", "olmocr.pipeline", *BASE, f"workspace={tmp_path / 'ws'}", f"pdfs=[{pdfs}]",
           "hydra.launcher.preemptible=false", f"hydra.sweep.dir={tmp_path}/s"]
    with BeakerEndpoint(tmp_path, grpc.StatusCode.UNAUTHENTICATED, "token expired") as beaker:
        proc = subprocess.run(run, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, **beaker.env, "BEAKER_TOKEN": "expired"})
    assert (proc.returncode, proc.stderr) == (
        2, f"error: Beaker at {beaker.address} refused the token (BEAKER_TOKEN, or the Beaker config file's): "
           "token expired\n")
    assert not (tmp_path / "ws").exists()  # nothing queued
    assert set(beaker.calls) == {"/allenai.beaker.Beaker/GetUser"}  # nothing created
    proc = subprocess.run([*run, "hydra.launcher.unreachable_s=3"], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **beaker.env})  # the endpoint is gone now
    assert (proc.returncode, proc.stderr) == (
        2, f"error: Beaker at {beaker.address} did not answer for 3 s (hydra.launcher.unreachable_s): the service "
           "is down or out of reach from here\n")
    assert not (tmp_path / "ws").exists()


def test_a_sweep_that_beaker_stops_part_way_says_what_was_submitted(monkeypatch, tmp_path, capfd):
    from beaker.exceptions import BeakerServerError

    fake = FakeBeaker()
    create = fake.experiment.create

    def create_once(**kwargs):
        if fake.created:
            raise BeakerServerError("workspace quota reached")
        return create(**kwargs)

    fake.experiment.create = create_once
    with pytest.raises(SystemExit):
        launch(monkeypatch, tmp_path, ["seed=1,2"], fake)
    (name, _), = fake.created
    assert capfd.readouterr().err == (f"error: job #1 (seed=2) was not submitted: Beaker at beaker.org:443 failed: "
                                      f"workspace quota reached; submitted before it: {name}\n")


@pytest.mark.integration
def test_the_task_command_trains_here(monkeypatch, tmp_path, cache_dir):
    """The spec's command, run as it is (bash -c …) with the result path on local disk: it trains."""
    launch(monkeypatch, tmp_path, ["hydra.launcher.dry_run=true", "hydra.launcher.gpus=0",
                                   "hydra.launcher.preemptible=false", f"hydra.launcher.result_path={tmp_path / 'results'}",
                                   "trainer.max_duration.value=2", "trainer.eval_interval=null",
                                   "checkpoint.interval=2", "data.steps.render.longest_side=256", "callbacks.plots=null"],
           module="olmocr.train")
    (spec,) = specs(tmp_path).values()
    command = spec["tasks"][0]["command"]
    venv_bin = os.path.dirname(sys.executable)
    proc = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}", "OLMOCR_CACHE": cache_dir})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "results" / "run" / "checkpoints" / "step_000002" / "model" / "model.safetensors").exists()


@pytest.mark.integration
def test_a_preempted_task_resumes_from_its_pushed_checkpoint(monkeypatch, tmp_path, cache_dir, s3_server):
    """The spec's command, killed hard (SIGKILL: no exit handler runs) once a checkpoint reached S3, then
    retried on a fresh machine: it restores the run dir and continues with the uninterrupted run's losses."""
    import json
    import shutil
    import signal
    import time

    import boto3
    import psutil
    from conftest import STORED_RUN, stored_losses

    s3 = boto3.client("s3", endpoint_url=s3_server)
    s3.create_bucket(Bucket="runs")
    common = [*STORED_RUN, "trainer.hard_stop.value=16", "checkpoint.interval=4"]
    results = tmp_path / "results"
    launch(monkeypatch, tmp_path, ["hydra.launcher.dry_run=true", "hydra.launcher.gpus=0",
                                   "hydra.launcher.sync_to=s3://runs/olmocr", "hydra.launcher.sync_every=1",
                                   f"hydra.launcher.result_path={results}", *common], module="olmocr.train")
    (spec,) = specs(tmp_path).values()
    assert spec["tasks"][0]["context"]["preemptible"] and spec["retry"] == {"allowedTaskRetries": 3}
    command = spec["tasks"][0]["command"]
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}", "OLMOCR_CACHE": cache_dir}

    def remote(suffix):
        found = s3.list_objects_v2(Bucket="runs", Prefix="olmocr/").get("Contents", [])
        return [o["Key"] for o in found if o["Key"].endswith(suffix)]

    saved = results / "run" / "checkpoints" / "step_000004" / "trainer_state.pt"
    with open(tmp_path / "attempt1.log", "w") as log:
        first = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 300
        while not saved.exists() and first.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint was saved"
            time.sleep(0.02)
        # The training process holds still (16 steps take 3 s on a quiet machine, less than a sync's round) while
        # its output sync goes on pushing; the preemption comes once the checkpoint is in S3.
        assert first.poll() is None, (tmp_path / "attempt1.log").read_text()[-3000:]
        trainer = next(p for p in psutil.Process(first.pid).children(recursive=True)
                       if "olmocr.train" in p.cmdline())
        trainer.suspend()
        while not remote("checkpoints/step_000004/trainer_state.pt") and first.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint reached S3"
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGKILL)  # preempted
        first.wait()
    assert first.returncode == -signal.SIGKILL and not remote("checkpoints/step_000016/trainer_state.pt")
    shutil.rmtree(results)  # the retry runs on another machine
    retry = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert retry.returncode == 0, retry.stderr[-3000:]
    resumed = [line for line in (retry.stdout + retry.stderr).splitlines() if "resumed from" in line]
    assert resumed and "/checkpoints/step_0000" in resumed[0] and "(step 0," not in resumed[0]
    rows = [json.loads(line) for line in open(results / "run" / "metrics.jsonl")]
    got = {r["step"]: r["train/loss"] for r in rows if r["kind"] == "train"}  # a retry repeats steps after its checkpoint
    assert sorted(got) == list(range(1, 17))
    want = stored_losses()
    for step in range(1, 17):
        assert got[step] == pytest.approx(want[step], abs=2e-3), step
    assert remote("checkpoints/step_000016/trainer_state.pt")  # the finished run is persistent too
