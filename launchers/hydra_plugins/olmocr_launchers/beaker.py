"""``hydra/launcher=beaker``: one Beaker experiment per job of a run or sweep.

Each experiment's task re-runs the same stage (``python -m <stage>``) with the job's overrides and
``cluster=local`` inside the container, wrapped by :mod:`.task_script` in what the stage declares it needs
(:class:`olmocr.cli.Launch`: one distributed job over GPUs and replicas or independent workers, a server
beside it, a run dir that outlives the task). Secrets are passed by name (Beaker
secrets mapped to environment variables), never by value. A dry run (the stage's ``dry_run=true``) writes
each spec to its job dir and submits nothing; ``wait=true`` follows each job's log until it ends and reports
its exit code. Every problem seen before submitting (settings, the git tree, each job's config, Beaker's
answers) is reported together, one line each.
"""

import datetime
import functools
import logging
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import cloudpickle
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra_plugins.olmocr_launchers import beaker_job
from hydra_plugins.olmocr_launchers.task_script import processes, stage_command, task_script
from omegaconf import DictConfig, OmegaConf, open_dict

from olmocr.cli import Launch, counted, fail, full_error, launch_mode, say_error, say_warning, shown
from olmocr.config import OneOf, Positive, Range, check_constraints
from olmocr.errors import UserError
from olmocr.faults import Unreachable

log = logging.getLogger(__name__)

PRIORITIES = ("low", "normal", "high", "urgent", "immediate")


@dataclass
class BeakerLauncherConf:
    _target_: str = "hydra_plugins.olmocr_launchers.beaker.BeakerLauncher"
    workspace: str | None = None  # e.g. ai2/olmocr
    budget: str | None = None
    image: str | None = None  # a Beaker image; or docker_image
    docker_image: str | None = None
    clusters: list[str] = field(default_factory=list)
    gpus: Annotated[int, Range(at_least=0)] = 0  # per replica
    replicas: Annotated[int, Range(at_least=1)] = 1
    priority: Annotated[str, OneOf(*PRIORITIES)] = "normal"
    preemptible: bool = True
    retries: Annotated[int | None, Range(at_least=0, null="3 when preemptible, else 0")] = None  # task retries
    env: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)  # environment variable -> Beaker secret name
    weka: dict[str, str] = field(default_factory=dict)  # Weka bucket -> mount path
    shared_memory: str = "10GiB"
    description: str | None = None
    setup: list[str] = field(default_factory=list)  # shell lines before the stage (cd /app, …)
    # The image holds (or checks out, with OLMOCR_GIT_COMMIT) committed code: refuse a dirty tree.
    require_clean_git: bool = True
    result_path: str = "/results"
    # Where a run outlives its task, so a retried or re-submitted job resumes. Either the run dir lives on
    # a mounted persistent folder (run_root, e.g. a Weka mount), or it is restored from and pushed to an
    # object store (sync_to, s3://… or gs://…) every sync_every seconds. Runs are placed by their local
    # run dir's path (outputs/train/<run_name>/…), so the same command finds the same run.
    run_root: str | None = None
    sync_to: str | None = None
    sync_every: Annotated[int, Range(at_least=1)] = 60
    rendezvous_port: Annotated[int, Range(at_least=1, at_most=65535)] = 29400
    wait: bool = False  # as the stage's wait=true: follow each job's log until it ends
    # How long submitting waits for Beaker to answer (a brownout, a network hiccup) before it stops in one line
    unreachable_s: Positive = 300.0
    dry_run: bool = False  # as the stage's dry_run=true: write each job's spec, submit nothing


def _git(*args: str) -> str | None:
    out = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else None


def build_spec(*, script: str, params: dict, git_commit: str | None, description: str, distributed: bool):
    """The Beaker experiment spec of one job (beaker-py's spec types); the replicas of a ``distributed`` job
    meet at the leader, others are independent workers."""
    from beaker import (
        BeakerConstraints,
        BeakerDataMount,
        BeakerDataSource,
        BeakerEnvVar,
        BeakerExperimentSpec,
        BeakerImageSource,
        BeakerJobPriority,
        BeakerResultSpec,
        BeakerRetrySpec,
        BeakerTaskContext,
        BeakerTaskResources,
        BeakerTaskSpec,
    )

    env = [BeakerEnvVar(name=k, value=str(v)) for k, v in sorted(params["env"].items())]
    env += [BeakerEnvVar(name=k, secret=v) for k, v in sorted(params["secrets"].items())]
    if git_commit:
        env.append(BeakerEnvVar(name="OLMOCR_GIT_COMMIT", value=git_commit))
    multi = distributed and params["replicas"] > 1
    task = BeakerTaskSpec(
        name="main",
        image=BeakerImageSource(beaker=params["image"], docker=params["docker_image"]),
        command=["bash", "-c", script],
        env_vars=env,
        datasets=[BeakerDataMount(source=BeakerDataSource(weka=bucket), mount_path=path)
                  for bucket, path in sorted(params["weka"].items())] or None,
        resources=BeakerTaskResources(gpu_count=params["gpus"] or None, shared_memory=params["shared_memory"]),
        constraints=BeakerConstraints(cluster=list(params["clusters"])) if params["clusters"] else None,
        context=BeakerTaskContext(priority=BeakerJobPriority[params["priority"]], preemptible=params["preemptible"]),
        result=BeakerResultSpec(path=params["result_path"]),
        replicas=params["replicas"] if params["replicas"] > 1 else None,
        leader_selection=multi,
        host_networking=multi,
        propagate_failure=True if multi else None,
    )
    retries = params["retries"] if params["retries"] is not None else (3 if params["preemptible"] else 0)
    return BeakerExperimentSpec(budget=params["budget"], description=description, tasks=[task],
                                retry=BeakerRetrySpec(allowed_task_retries=retries) if retries else None)


class BeakerLauncher(Launcher):
    checks_every_job = True  # launch() composes and checks every job before it submits any (olmocr.private.hydra)

    def __init__(self, **params: Any) -> None:
        self.params = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                       for k, v in params.items()}
        self.config: DictConfig | None = None
        self.hydra_context = None
        self.task_function = None
        self._stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def _check(self, problems: list[str]) -> str | None:
        """The launcher's own settings and the git tree, each problem added to ``problems``; the commit the job's
        image holds."""
        p = self.params
        for key in ("workspace", "budget"):
            if not p[key]:
                problems.append(f"hydra.launcher.{key}: required to submit to Beaker")
        if bool(p["image"]) == bool(p["docker_image"]):
            problems.append("hydra.launcher.image or hydra.launcher.docker_image: set exactly one")
        try:
            check_constraints(p, BeakerLauncherConf, "hydra.launcher")
        except UserError as exc:
            problems.append(str(exc))
        commit = _git("rev-parse", "HEAD")
        changed = (_git("status", "--porcelain") or "").splitlines() if p["require_clean_git"] else []
        if changed:
            names = [line.split(None, 1)[-1] for line in changed]  # "XY path"; the first line lost its leading space
            problems.append(f"the git tree has uncommitted changes, which the job's image would not have: "
                            f"{', '.join(names[:5])}{f' and {len(names) - 5} more' if len(names) > 5 else ''}; commit "
                            "them (or set hydra.launcher.require_clean_git=false)")
        return commit

    def _check_needs(self, module: str, needs: Launch) -> list[str]:
        """What the stage needs against what the job gives it: the problems."""
        p, problems = self.params, []
        if needs.resumes and p["preemptible"] and not (p["sync_to"] or p["run_root"]):
            problems.append(f"a preemptible {module} job would start over when preempted: set "
                            "hydra.launcher.sync_to=s3://… (checkpoints pushed as they are written) or "
                            "hydra.launcher.run_root=<a mounted Weka path>, or hydra.launcher.preemptible=false")
        if needs.replica_state and p["replicas"] > 1 and p["sync_to"] and not p["run_root"]:
            problems.append(f"{needs.replica_state}, and sync_to keeps the leader's: with several replicas use "
                            "hydra.launcher.run_root=<a shared mounted path> instead")
        if needs.distributed and needs.check_world is not None:
            try:
                needs.check_world(processes(p["gpus"], p["replicas"], needs.sidecar))
            except UserError as exc:
                problems.append(str(exc))
        return problems

    def _client(self):
        """A client whose token, workspace and secrets Beaker has answered for, before anything is prepared or
        created."""
        from beaker import Beaker
        from beaker.exceptions import BeakerConfigurationError, BeakerSecretNotFound, BeakerWorkspaceNotFound

        workspace = self.params["workspace"]
        try:
            client = Beaker.from_env(default_workspace=workspace, check_for_upgrades=False)
        except BeakerConfigurationError:
            raise UserError("Beaker credentials: set BEAKER_TOKEN (or run `beaker account login`)") from None
        try:
            self._wait_for(client)
            client.user.get()
            client.workspace.get(workspace)
            missing = []
            for env_name, secret in self.params["secrets"].items():
                try:
                    client.secret.get(secret)
                except BeakerSecretNotFound:
                    missing.append(f"hydra.launcher.secrets.{env_name}: Beaker secret {secret!r} does not exist in "
                                   f"workspace {workspace}")
            if missing:
                raise UserError("\n".join(missing))
        except BeakerWorkspaceNotFound:
            raise UserError(f"hydra.launcher.workspace: Beaker has no workspace {workspace!r} (or this token "
                            "cannot see it)") from None
        except Exception as exc:  # noqa: BLE001 - whatever Beaker answered: said in one line if it is a fault
            fault = beaker_fault(exc, client.config.rpc_address)
            if fault is None:
                raise
            raise UserError(fault) from None
        return client

    def _wait_for(self, client) -> None:
        """Until Beaker's endpoint answers, at most ``unreachable_s``: its client waits out an endpoint that is
        not there without end, saying so only in debug logs. The probe is a bare request on the client's own
        channel, which waits for a connection; any answer, a refusal included, means the endpoint is there."""
        import grpc
        from beaker import beaker_pb2

        address, wait_s = client.config.rpc_address, self.params["unreachable_s"]
        deadline, warned = time.monotonic() + wait_s, False
        while True:
            try:
                client.service.GetUser(beaker_pb2.GetUserRequest(), wait_for_ready=True,
                                       timeout=max(0.1, min(5.0, deadline - time.monotonic())))
                return
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                    return
            if time.monotonic() >= deadline:
                raise UserError(f"Beaker at {address} did not answer for {wait_s:.0f} s (hydra.launcher.unreachable_s):"
                                " the service is down or out of reach from here")
            if not warned:
                log.warning("Beaker at %s does not answer; waiting up to %.0f s (hydra.launcher.unreachable_s)",
                            address, wait_s)
                warned = True

    def _command(self, stage, overrides: list[str], sweep_config: DictConfig, key: str) -> list[str]:
        """``python -m`` arguments of the task: the stage with the job's overrides, or the shipped job."""
        if stage is not None:
            return stage_command(stage.module, overrides, self.run_dir(key))
        state = (self.task_function, sweep_config, Singleton.get_state())
        return ["hydra_plugins.olmocr_launchers.beaker_job", beaker_job.encode(state), self.params["result_path"]]

    def run_dir(self, key: str) -> str:
        if self.params["run_root"]:
            return f"{self.params['run_root'].rstrip('/')}/{key}"
        return f"{self.params['result_path'].rstrip('/')}/run"

    def _script(self, command: list[str], needs: Launch, key: str) -> str:
        p = self.params
        sync_to = f"{p['sync_to'].rstrip('/')}/{key}" if p["sync_to"] else None
        return task_script(command, run_dir=self.run_dir(key), gpus=p["gpus"], replicas=p["replicas"],
                           distributed=needs.distributed, rendezvous_port=p["rendezvous_port"], sidecar=needs.sidecar,
                           sync_to=sync_to, sync_every=p["sync_every"], setup=p["setup"])

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        # What a stage declares (olmocr.cli.stage) rides on its task function; any other function is shipped
        # with the job instead (see beaker_job) and runs as one process per replica.
        stage = getattr(self.task_function, "stage", None)
        if stage is None:
            log.info("the task function is no declared stage: it is shipped with each job")
        # Every job is checked and its spec written, then Beaker asked, before anything is submitted; every
        # problem found on the way is said together, one line each, so one try finds them all.
        problems: list[str] = []
        try:
            commit = self._check(problems)
            composed = [self._compose(list(overrides), idx)
                        for idx, overrides in enumerate(counted(job_overrides), start=initial_job_idx)]
            dry_run, wait = launch_mode([config for config, _ in composed], self.params)
            jobs = [job for job in (self._job(stage, config, job_dir, list(overrides), idx, commit, dry_run, problems)
                                    for idx, ((config, job_dir), overrides)
                                    in enumerate(zip(composed, job_overrides), start=initial_job_idx)) if job]
            client = None
            if not dry_run:
                try:
                    client = self._client()
                except UserError as exc:
                    problems.extend(str(exc).splitlines())
            if problems:
                for problem in dict.fromkeys(problems):
                    say_error(problem)
                raise SystemExit(2)
            for _, spec, spec_path, _, prepare in jobs:
                spec_path.parent.mkdir(parents=True, exist_ok=True)
                spec.to_file(spec_path)
                if prepare is not None:
                    prepare()
        except (UserError, Unreachable) as exc:  # a user error, or storage a job's preparation needs: one line
            if full_error():
                raise
            fail(str(exc))
        finally:
            HydraConfig.instance().set_config(self.config)  # the launching process's own config again
        returns = []
        for idx, (ret, spec, spec_path, name, _) in enumerate(jobs, start=initial_job_idx):
            overrides = shown(ret.overrides)
            if client is None:
                print(f"dry run: #{idx} {overrides}: its spec {spec_path}; nothing submitted", flush=True)
                ret.return_value = {"spec": str(spec_path)}
            else:
                try:
                    workload = client.experiment.create(spec=spec, name=name)
                except Exception as exc:  # noqa: BLE001 - one line, with what was submitted before it
                    fault = beaker_fault(exc, client.config.rpc_address) or f"{type(exc).__name__}: {exc}"
                    done = ", ".join(r.return_value["name"] for r in returns) or "none"
                    fail(f"job #{idx} ({overrides}) was not submitted: {fault}; submitted before it: {done}")
                url = client.experiment.url(workload)
                print(f"#{idx} {overrides}: Beaker experiment {workload.experiment.id} submitted: {url} (follow and "
                      "stop it there)", flush=True)
                ret.return_value = {"workload": workload.experiment.id, "name": name, "url": url}
                if wait:
                    try:
                        ret = self._follow(client, workload, ret)
                    except KeyboardInterrupt:  # Ctrl-C stops the wait, not the job
                        say_error(f"stopped following; Beaker experiment {workload.experiment.id} goes on: {url}")
                        raise SystemExit(128 + signal.SIGINT) from None
            returns.append(ret)
        failed = [r._return_value for r in returns if isinstance(r._return_value, JobFailed)]
        if failed:  # followed jobs that ended badly: one line, not a trace of this launcher
            fail(str(failed[0]) + (f" (and {len(failed) - 1} more job(s) failed)" if len(failed) > 1 else ""))
        return returns

    def _compose(self, overrides: list[str], idx: int) -> tuple[DictConfig, Path]:
        """A job's config, as the job will have it, and its job dir here."""
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = f"beaker_{self._stamp}_{idx}"
            sweep_config.hydra.job.num = idx
        HydraConfig.instance().set_config(sweep_config)
        return sweep_config, Path(str(self.config.hydra.sweep.dir)) / str(sweep_config.hydra.sweep.subdir)

    def _job(self, stage, sweep_config: DictConfig, job_dir: Path, overrides: list[str], idx: int, commit: str | None,
             dry_run: bool, problems: list[str]):
        """One job's JobReturn (to be completed), its spec (also written to its job dir), its name and the work its
        stage does before it is submitted (None: none); None, with what stops it added to ``problems``, when the
        job cannot be built."""
        HydraConfig.instance().set_config(sweep_config)
        key = job_dir.as_posix().lstrip("/")  # the run's place: the same for the same command
        task_overrides = [o for o in overrides if not o.startswith("hydra.")]
        module = stage.module if stage is not None else "(shipped job)"
        try:
            if stage is not None:  # checked as the job will check it, before anything is submitted
                stage.check_job(sweep_config)
            # Each job's own config decides what it needs (a sweep over algo=…, say).
            needs = stage.launch(sweep_config) if stage is not None else Launch()
        except UserError as exc:
            problems.append(str(exc))
            return None
        problems.extend(self._check_needs(module, needs))
        if needs.resumes and _holds_a_run(job_dir):  # a run started here: the job does not share these files
            kept = self._place(key) if self.params["run_root"] or self.params["sync_to"] else None
            say_warning(f"{job_dir} holds a run made here, which the Beaker job cannot see: "
                        + (f"it goes on from what {kept} holds, or starts over" if kept else "it starts over"))
        # Run once Beaker has answered for the token (launch): a refused token must not leave PDFs queued.
        prepare = (functools.partial(needs.prepare, sweep_config) if needs.prepare is not None and not dry_run else None)
        task_overrides = needs.job_overrides(task_overrides)
        shown = [o for o in filter_overrides(task_overrides) if not o.startswith("cluster=")]
        try:
            spec = build_spec(script=self._script(self._command(stage, task_overrides, sweep_config, key), needs, key),
                              params=self.params, git_commit=commit, distributed=needs.distributed,
                              description=self.params["description"] or " ".join(["python -m", module, *shown]))
        except (ValueError, KeyError):  # settings a spec cannot be built from, said above
            if not problems:
                raise
            return None
        spec_path = job_dir / "beaker_spec.yaml"  # written once every job is checked
        task_cfg = OmegaConf.masked_copy(sweep_config, [k for k in sweep_config if k != "hydra"])
        ret = JobReturn(overrides=overrides, cfg=task_cfg, hydra_cfg=sweep_config, working_dir=str(job_dir),
                        task_name=sweep_config.hydra.job.name, status=JobStatus.COMPLETED)
        name = f"olmocr-{sweep_config.hydra.job.config_name}-{self._stamp}-{idx}".replace("_", "-")
        return ret, spec, spec_path, name, prepare

    def _place(self, key: str) -> str:
        return self.run_dir(key) if self.params["run_root"] else f"{self.params['sync_to'].rstrip('/')}/{key}"

    def _follow(self, client, workload, ret: JobReturn) -> JobReturn:
        """Stream the job's logs until it ends. A shipped job's own JobReturn comes back from the result
        dataset; otherwise the exit code decides the status."""
        job = client.workload.get_latest_job(workload)
        said = None  # the job's last one-line error (a stage's `error: …`), for the line that ends a failed job
        for chunk in client.job.logs(job, follow=True):
            message = chunk.message
            text = (message.decode(errors="replace") if isinstance(message, bytes) else message).rstrip()
            log.info("%s", text)
            said = next((line.removeprefix("error: ") for line in reversed(text.splitlines())
                         if line.startswith("error: ")), said)
        job = client.job.get(job.id)
        results = client.job.get_results(job)
        if results is not None:
            try:
                data = b"".join(client.dataset.stream_file(results, beaker_job.RESULT_FILE))
                return cloudpickle.loads(data)
            except (FileNotFoundError, LookupError):
                pass  # a stage run by `python -m` leaves no JobReturn: its exit code says how it went
        code = job.status.exit_code
        submitted = {**ret.return_value, "exit_code": code}
        if code == 0:
            ret.return_value = submitted
        else:
            ret.status = JobStatus.FAILED
            ret.return_value = JobFailed(f"Beaker job {job.id} exited with code {code}" + (f": {said}" if said else "")
                                         + f"; {submitted['url']}")
        return ret


def _holds_a_run(job_dir: Path) -> bool:
    """Whether a job dir here holds more than what launching writes there (a run made here)."""
    launching = {".hydra", ".submitit", "beaker_spec.yaml", "multirun.yaml"}
    return job_dir.is_dir() and any(entry.name not in launching for entry in job_dir.iterdir())


class JobFailed(RuntimeError):
    """A followed job that exited with an error and sent back no result of its own."""


def beaker_fault(exc: BaseException, address: str) -> str | None:
    """What Beaker's answer means, in one line, when it is no answer to the request: the token refused, the
    service down or out of reach, a failure on its side. None for anything else."""
    import grpc
    from beaker.exceptions import BeakerPermissionsError, BeakerServerError, BeakerServerUnavailableError

    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    if code == grpc.StatusCode.UNAUTHENTICATED or isinstance(exc, BeakerPermissionsError):
        return (f"Beaker at {address} refused the token (BEAKER_TOKEN, or the Beaker config file's): {details}")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) or isinstance(
            exc, BeakerServerUnavailableError):
        return f"Beaker at {address} did not answer: {details}"
    if isinstance(exc, BeakerServerError):
        return f"Beaker at {address} failed: {details}"
    return None


ConfigStore.instance().store(group="hydra/launcher", name="beaker", node=BeakerLauncherConf, provider="olmocr")
