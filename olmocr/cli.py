"""Stages and their command line.

A stage is a ``run(cfg, output_dir)`` function declared with :func:`stage` in the module that
``python -m`` runs (``olmocr/<package>/__main__.py``, or a module such as ``olmocr/pipeline/stats.py``),
next to its primary config ``conf/<config>.yaml``. The declaration is the whole registration: it gives
the command line (``--help``, ``dry_run=true``, ``cluster=<name>``, one-line user errors), and it says what
the stage needs from a cluster job (:class:`Launch`), which the launchers read from the task function Hydra
hands them instead of knowing any stage. :func:`stages` finds every declared stage; tests and benchmarks
iterate over it, so a new stage is covered by them without being listed anywhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import errno
import importlib
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf

from olmocr.config import CONF_DIR, register_schemas, validate
from olmocr.errors import UserError
from olmocr.faults import MISPLACED, Unreachable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sidecar:
    """A server started beside the stage on the job's leader replica (the GRPO server layout)."""

    command: Callable[[str], list[str]]  # the server's command line, listening on the given host
    gpus: int  # it takes the leader's first ``gpus`` GPUs; the stage runs on the others of every replica
    host_key: str  # the stage's config key that is told where the server listens


# Keys of every stage's config (olmocr.config.StageConfig) that say what a cluster launcher does with a job, not
# what the job does: left out of the job's own command.
LAUNCH_KEYS = ("dry_run", "wait")


def launch_mode(configs: Sequence[DictConfig], params: dict) -> tuple[bool, bool]:
    """``(dry_run, wait)`` of a launch: ``dry_run=true``/``wait=true`` in any of its jobs' configs (the command
    line, an experiment file) or the launcher's own ``hydra.launcher.dry_run``/``wait``."""
    return tuple(bool(params.get(key)) or any(bool(c.get(key)) for c in configs) for key in LAUNCH_KEYS)


def shown(overrides: Sequence[str]) -> str:
    """A job's overrides as a line about it shows them: what the job does, not where or how it is launched."""
    return " ".join(o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "cluster=", *(
        f"{key}=" for key in LAUNCH_KEYS)))) or "(no overrides)"


@dataclass(frozen=True)
class Launch:
    """What a stage asks of a cluster job."""

    # True: one process per GPU, and the replicas of a job form one torch.distributed job (a rendezvous at
    # the leader). False: one process per replica, each an independent worker.
    distributed: bool = False
    # Re-running the same command continues from what the run dir holds (checkpoints): a preemptible job
    # needs a run dir that outlives its task.
    resumes: bool = False
    sidecar: Sidecar | None = None
    # Why each replica keeps run-dir state the others lack (None: the leader's run dir is the whole run),
    # which a run dir copied from the leader cannot bring back.
    replica_state: str | None = None
    # Work done once, on the submitting machine, before a job is created (not in a dry run), and the keys of
    # the overrides it takes care of, left out of the job's command: the pipeline queues pdfs= there, so the
    # job's replicas only work instead of each listing and sampling the PDFs again.
    prepare: Callable[[DictConfig], None] | None = None
    prepared: tuple[str, ...] = ()
    # A distributed stage's check of its number of processes, which only the launcher's layout decides (GRPO:
    # a step's completions split into whole groups over them): called with it before anything is submitted.
    check_world: Callable[[int], None] | None = None

    def job_overrides(self, overrides: list[str]) -> list[str]:
        """``overrides`` without those :attr:`prepare` took care of and without :data:`LAUNCH_KEYS`."""
        return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in (*self.prepared, *LAUNCH_KEYS)]


class Stage:
    """A declared stage: call it like its ``run`` (the config is validated first), or run its command line
    with :meth:`main`."""

    def __init__(self, run: Callable[[DictConfig, str | None], Any], config: str,
                 launch: Launch | Callable[[DictConfig], Launch], succeeded: Callable[[Any], bool] | None,
                 check: Callable[[DictConfig], None] | None = None,
                 paths: Callable[[DictConfig], None] | None = None, present: Callable | None = None):
        self.run, self.config, self._launch, self.succeeded, self._check = run, config, launch, succeeded, check
        self._paths, self._present = paths, present
        self.module = _module_of(run)
        self.doc = (sys.modules[run.__module__].__doc__ or "").strip()
        self.task = self._task_function()

    def __call__(self, cfg: DictConfig, output_dir: str | None = None):
        return self.run(self.check(cfg), output_dir)

    def check(self, cfg: DictConfig, quiet: bool = False) -> DictConfig:
        """The config validated (:func:`olmocr.config.validate`), its pages presented as the model it loads was
        trained to read them (``present``, in place; said unless ``quiet``), and checked by the stage's own
        ``check``: what a run, a dry run and a launcher (before it submits) all do first. UserError: what is
        wrong."""
        validate(cfg)
        if self._present is not None:
            done = self._present(cfg, command_line_keys())
            if not quiet:
                if done.taken:
                    log.info("pages presented as the model was trained to read them: %s", ", ".join(done.taken))
                for overridden in done.overridden:
                    say_warning(f"{overridden}; the command line says so, and this run presents them so")
        if self._check is not None:
            self._check(cfg)
        return cfg

    def check_paths(self, cfg: DictConfig) -> None:
        """The stage's checks of the local paths the run reads (UserError: what is missing)."""
        if self._paths is not None:
            self._paths(cfg)

    def check_job(self, job_config: DictConfig) -> None:
        """:meth:`check` of a job a launcher composed (its ``hydra`` node included), as the job will see it."""
        with _as_job(job_config) as task_config:
            self.check(task_config, quiet=True)

    def path_problems(self, job_config: DictConfig) -> str | None:
        """What :meth:`check_paths` says of a job a launcher composed, checked on this machine, or None."""
        with _as_job(job_config) as task_config:
            try:
                self.check_paths(task_config)
            except UserError as exc:
                return str(exc)
        return None

    def __repr__(self) -> str:
        return f"Stage({self.module}, config={self.config})"

    def launch(self, cfg: DictConfig) -> Launch:
        """What a job of this config needs from its cluster (UserError: it cannot run there as given)."""
        return self._launch(cfg) if callable(self._launch) else self._launch

    def main(self) -> None:
        """The command line: ``--help`` is answered here (fast), ``cluster=<name>`` submits the run, anything
        else runs the stage as a Hydra app."""
        import hydra

        args = sys.argv[1:]
        if "--help" in args or "-h" in args:
            print(stage_help(self.module, self.config, self.doc, [a for a in args if not a.startswith("-")]))
            return
        from olmocr.private import hydra as hooks

        sys.argv = submit_on_cluster(null_groups_left_out(sys.argv))
        with (hooks.mode_from_command_line(sys.argv[1:]), hooks.on_override_failure(override_failure_in_one_line),
              hooks.on_missing_option(missing_option_in_one_line), hooks.batch_checked_by_launcher()):
            hydra.main(config_path=CONF_DIR, config_name=self.config, version_base="1.3")(self.task)()

    def _task_function(self):
        """The function Hydra runs for each job; launchers find the stage on it (``task.stage``)."""

        def task(cfg: DictConfig):
            from hydra.core.hydra_config import HydraConfig

            from olmocr.faults import Stopped

            try:
                if cfg.get("dry_run"):
                    print(OmegaConf.to_yaml(self.check(cfg)))
                    return {"dry_run": True}
                result = self(cfg, HydraConfig.get().runtime.output_dir)
            except UserError as exc:
                if full_error():
                    raise
                fail(str(exc))
            except Stopped as exc:  # a signal the stage stopped for at a point it resumes from
                say_error(str(exc))
                raise SystemExit(128 + exc.signum) from None
            except KeyboardInterrupt:  # Ctrl-C: where things stand, not a trace of wherever the process was
                say_error(f"interrupted (run dir {HydraConfig.get().runtime.output_dir}); what was written is kept, "
                          "and a training run resumes from its newest checkpoint when the same command runs again")
                raise SystemExit(128 + signal.SIGINT) from None
            except Exception as exc:
                fault = _fault(exc, cfg, HydraConfig.get().runtime.output_dir)
                if fault is None:
                    raise
                fail(fault)
            if self.succeeded is not None and not self.succeeded(result):
                raise SystemExit(1)
            return result

        task.stage = self
        task.__module__ = self.module  # Hydra names the job (and its log file) after the task's module
        task.__qualname__ = task.__name__ = self.module.rsplit(".", 1)[-1]
        return task

    def placeholders(self) -> list[str]:
        """Overrides giving every value the config leaves to the command line (``???``) a well-formed stand-in,
        for checks that compose and validate the stage without real inputs (tests, benchmarks)."""
        from hydra import compose, initialize_config_dir

        register_schemas()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name=self.config)
        out = []
        for key in sorted(OmegaConf.missing_keys(cfg)):
            parent, _, leaf = key.rpartition(".")
            node = (OmegaConf.select(cfg, parent) if parent else cfg)._get_node(leaf)
            out.append(f"{key}=[.]" if isinstance(node, ListConfig) else f"{key}=.")
        return out


@contextlib.contextmanager
def _as_job(job_config: DictConfig) -> Iterator[DictConfig]:
    """A launcher's composed job config without its ``hydra`` node, with ``${hydra:…}`` resolving to the job's
    values while it is used."""
    import copy

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write

    task_config = copy.deepcopy(job_config)
    with read_write(task_config), open_dict(task_config):
        del task_config["hydra"]
    hydra = HydraConfig.instance()
    launching = hydra.cfg
    hydra.set_config(job_config)
    try:
        yield task_config
    finally:
        hydra.cfg = launching


REGISTRY: dict[str, Stage] = {}
# How a module declares a stage; stages() imports only the modules whose source has it.
DECLARATION = re.compile(r"^@stage\(", re.M)


def stage(config: str, *, launch: Launch | Callable[[DictConfig], Launch] = Launch(),
          succeeded: Callable[[Any], bool] | None = None,
          check: Callable[[DictConfig], None] | None = None,
          paths: Callable[[DictConfig], None] | None = None,
          present: Callable | None = None) -> Callable[[Callable], Stage]:
    """Declare a stage: ``run(cfg, output_dir)`` with its primary config ``conf/<config>.yaml``, what it needs
    from a cluster (a :class:`Launch`, or a function of the config giving one), and optionally ``succeeded``,
    a check of its result (the command exits with code 1 when it fails), and ``check``, the stage's checks of
    its config's values that need nothing loaded or reached (UserError naming the key), run after
    :func:`olmocr.config.validate` by a run, a dry run and a launcher before it submits; ``paths``, its checks
    of the local paths the run reads (a model folder, a bench folder), run where the run runs, before its run
    dir is made, by a dry run too, and by a launcher whose jobs share this machine's files (SLURM), where a path
    missing here is said as a warning (the nodes may mount what the login node does not); ``present``, how the
    config's data steps take the presentation of the model it loads
    (:func:`olmocr.data.presented.presents_as_trained`)."""
    if not os.path.isfile(os.path.join(CONF_DIR, f"{config}.yaml")):
        raise UserError(f"stage config {config!r}: conf/{config}.yaml does not exist")

    def declare(run: Callable) -> Stage:
        declared = Stage(run, config, launch, succeeded, check, paths, present)
        other = declared_for(config)
        assert other is None or other.module == declared.module, f"{declared} and {other} share conf/{config}.yaml"
        REGISTRY[declared.module] = declared
        return declared

    return declare


def declared_for(config: str) -> Stage | None:
    """The declared stage whose primary config is ``conf/<config>.yaml`` (each stage has its own), once its module
    is imported: the one a Hydra app of that config runs."""
    return next((s for s in REGISTRY.values() if s.config == config), None)


def stages() -> dict[str, Stage]:
    """Every stage of the package, by module (``olmocr.pipeline.stats``, …)."""
    root = os.path.dirname(os.path.abspath(__file__))
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.isfile(os.path.join(folder, d, "__init__.py"))]  # packages only
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                if not DECLARATION.search(fh.read()):
                    continue
            parts = os.path.relpath(os.path.join(folder, name[:-3]), os.path.dirname(root)).split(os.sep)
            importlib.import_module(".".join(parts))
    return dict(sorted(REGISTRY.items()))


def _module_of(run: Callable) -> str:
    """The module ``python -m`` runs for a stage declared in ``run``'s module."""
    module = run.__module__
    if module == "__main__":  # started as `python -m …`: the module's real name is in its spec
        module = sys.modules["__main__"].__spec__.name
    return module.removesuffix(".__main__")


def command_line_keys() -> list[str]:
    """The keys the running job's command line sets values of (``convert.steps.render.longest_side``, …; not the
    config groups it chooses, ``convert=default``); none outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    keys = [o.split("=", 1)[0].lstrip("+~").split("@", 1)[0] for o in HydraConfig.get().overrides.task]
    groups = config_groups()
    return [key for key in keys if key.replace(".", "/") not in groups]


def null_groups_left_out(argv: list[str]) -> list[str]:
    """``group=null`` (as a config's defaults spell a group left out, ``- filter: null``) becomes Hydra's ``~group``:
    Hydra itself refuses the first with a 25-line trace."""
    groups = config_groups()
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        name = key.lstrip("+")
        out.append(f"~{name}" if sep and value.strip() == "null" and name in groups else arg)
    return out


def missing_option_in_one_line(group: str, option: str) -> None:
    """An unknown option of a config group (``optimizer=nosuch``, ``+experiment=no_such_exp``) is one ``error:`` line
    naming the group and its options, with the close match; Hydra's own is a 12-17-line block."""
    options = config_groups().get(group)
    if options:
        close = difflib.get_close_matches(option, options, n=1)
        fail(f"{group}={option}: no such option in conf/{group}/" + (f"; did you mean {close[0]}?" if close else "")
             + f" (the options: {', '.join(options)})")


def config_groups() -> dict[str, list[str]]:
    """Every config group under conf/ and its options."""
    groups = {}
    for folder, _, files in sorted(os.walk(CONF_DIR)):
        options = sorted(f[:-5] for f in files if f.endswith(".yaml"))
        if folder != CONF_DIR and options:
            groups[os.path.relpath(folder, CONF_DIR).replace(os.sep, "/")] = options
    return groups


def stage_help(module: str, config_name: str, doc: str, overrides: list[str]) -> str:
    """A stage's ``--help``: what it does, the config groups and their options, and its config with the
    overrides given. (Hydra's own ``--help`` copies its config repository once per group, which takes
    seconds with this tree; ``--hydra-help`` still shows Hydra's options.)"""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_schemas()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            config = OmegaConf.to_yaml(hydra_compose(config_name=config_name, overrides=overrides))
    except Exception as exc:  # noqa: BLE001 - a bad override: say so, help is still useful without it
        config = f"(cannot compose with {' '.join(overrides)}: {str(exc).splitlines()[0]})\n"
    width = max(len(group) for group in config_groups())
    lines = [doc.strip(), "", f"Usage: python -m {module} [group=option ...] [key=value ...] "
             "[dry_run=true] [-m key=a,b ...] [cluster=<name>]", "",
             "== Configuration groups (conf/<group>/<option>.yaml) ==", ""]
    lines += [f"{group:<{width}}: {', '.join(options)}" for group, options in config_groups().items()]
    lines += ["", "== Config ==", "Override anything in the config (foo.bar=value)", "", config.rstrip(), "",
              "Hydra's own flags: python -m " + module + " --hydra-help"]
    return "\n".join(lines)


def override_failure_in_one_line(override, cfg: DictConfig, exc: BaseException) -> None:
    """An override Hydra cannot apply is one ``error:`` line naming the key, as every other config error: a typo
    (Hydra's five lines suggest ``+key=…``, which validation then refuses for a schema's node) gets the close match,
    a wrong type what was expected, and a key below a null node (``finetune.lora.r=16`` where finetune=full leaves
    finetune.lora null; OmegaConf fails there on an assertion, a 20-line trace) the options that fill the node."""
    from hydra.errors import ConfigCompositionException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    key = override.key_or_group
    if isinstance(exc, AssertionError):
        parts = key.split(".")
        null = next((".".join(parts[:i]) for i in range(1, len(parts))
                     if OmegaConf.select(cfg, ".".join(parts[:i]), throw_on_missing=False) is None), None)
        if null is None:
            return
        options = config_groups().get(parts[0])
        fill = (f"choose the {parts[0]}=… option that fills it ({', '.join(options)}), or give it whole"
                if options else "give it whole")
        fail(f"{key}: {null} is null in this config; {fill} ({null}={{…}})")
    cause = exc.__cause__ if isinstance(exc, ConfigCompositionException) else None
    if not isinstance(cause, OmegaConfBaseException):
        return
    where = getattr(cause, "full_key", None) or key  # the key that failed, inside a map given whole
    parent_path, _, leaf = where.rpartition(".")
    parent = OmegaConf.select(cfg, parent_path, throw_on_missing=False) if parent_path else cfg
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and isinstance(parent, DictConfig):
        fail(f"{where}: {_no_such_key(parent, leaf, where[:-len(leaf)], key)}")
    fail(f"{where}: {str(cause).splitlines()[0]}")


def _no_such_key(node: DictConfig, leaf: str, prefix: str, override_key: str) -> str:
    """Why ``leaf`` cannot be set in ``node``, with the key meant: a builder's (``_target_``) node takes its
    signature's parameters, a schema's node its fields, an open map anything given with ``+``."""
    from olmocr.config import schema_for

    if "_target_" in node:
        owner, keys = node._target_, [f.name for f in dataclasses.fields(schema_for(node._target_))
                                      if f.name != "_target_"]
    else:
        schema = OmegaConf.get_type(node)
        owner = schema.__name__ if dataclasses.is_dataclass(schema) else "this map"
        keys = [str(k) for k in node.keys() if k != "hydra"]  # the root holds Hydra's own node: not a key to set
    if leaf in keys:  # the builder takes it, and the config leaves it to its default: adding it is the way
        return f"{owner} takes it, and this config leaves it at its default: +{override_key}=… sets it"
    close = difflib.get_close_matches(leaf, keys, n=1)
    hint = f"did you mean {prefix}{close[0]}?" if close else f"its keys: {', '.join(sorted(keys))}"
    if owner == "this map":
        hint += f"; +{override_key}=… adds it"  # not the value given: it may be a secret
    return f"no such key in {owner} ({hint})"


def _setup_fault(exc: OSError, folder: str, what: str) -> str:
    from olmocr.faults import no_space

    full = no_space(exc, folder)
    return str(full) if full is not None else (f"cannot set up the {what} {folder}: {exc.strerror or exc}"
                                               + (f" ({exc.filename})" if exc.filename and exc.filename != folder
                                                  else ""))


def make_dir(folder: str, what: str, subdir: str | None = None) -> None:
    """Make a run's (or a sweep's) dir, and ``subdir`` in it, and write a page of bytes there (removed again) before
    Hydra writes its config files and log: an OS error (a full disk, a spent quota, a read-only or foreign folder)
    ends the program in one line naming the folder, not in a trace from inside Hydra. (A full tmpfs still makes
    folders; only a write finds it full.)"""
    target = os.path.join(folder, subdir) if subdir else folder
    try:
        os.makedirs(target, exist_ok=True)
        probe = os.path.join(target, f".space.{os.getpid()}")
        try:
            with open(probe, "wb") as fh:
                fh.write(bytes(4096))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(probe)
    except OSError as exc:
        fail(_setup_fault(exc, folder, what))


def prepare_job(stage: Stage | None, config: DictConfig, folder: str) -> None:
    """What every job is checked for before Hydra makes its dir (a config error leaves no run dir behind): its
    config, as the job sees it, the local paths it reads (a dry run too: what the run would stop for at once), and
    that no running stage holds the dir (:mod:`olmocr.runlock`); then its dir is made."""
    from olmocr.runlock import check_free

    with said_in_one_line():
        if stage is not None:
            stage.check_job(config)
            stage.check_paths(config)
        if os.environ.get("RANK", "0") == "0":  # the other ranks of a job start while its rank 0 holds the dir
            check_free(folder)
    make_dir(folder, "run dir", config.hydra.output_subdir)


def job_dir(config: DictConfig, dir_key: str, subdir_key: str | None = None) -> str:
    """The dir Hydra gives a job (``hydra.run.dir``, or a sweep's dir and the job's subdir), resolved as the job
    resolves it (``${hydra:…}`` with the job's own values)."""
    from hydra.core.hydra_config import HydraConfig

    hydra, launching = HydraConfig.instance(), HydraConfig.instance().cfg
    hydra.set_config(config)
    try:
        return os.path.join(*(str(OmegaConf.select(config, key)) for key in (dir_key, subdir_key) if key))
    finally:
        hydra.cfg = launching


class StageChecks(Callback):
    """A Hydra callback (``hydra.callbacks`` in ``conf/cluster/local.yaml``): a run is checked and its dir made
    before Hydra writes there (:func:`prepare_job`); a sweep's dir is made before the sweeper writes its
    ``multirun.yaml``, and the local launcher plugin prepares each of its jobs."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        prepare_job(declared_for(config.hydra.job.config_name), config, job_dir(config, "hydra.run.dir"))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        make_dir(str(config.hydra.sweep.dir), "sweep dir")


def counted(jobs: Sequence, every_s: float = 10.0) -> Iterator:
    """``jobs`` one by one as they are checked, with a line every ``every_s`` seconds saying how many are, how fast
    and how long the rest takes: composing and checking a job costs ~0.25 s, and a 1,000-job array was silent
    for minutes."""
    start = last = time.monotonic()
    for i, job in enumerate(jobs):
        yield job
        now = time.monotonic()
        if now - last >= every_s and i + 1 < len(jobs):
            rate = (i + 1) / (now - start)
            log.info("checked %d/%d jobs (%.1f jobs/s, %.0f s to go)", i + 1, len(jobs), rate,
                     (len(jobs) - i - 1) / rate)
            last = now


def submit_on_cluster(argv: list[str]) -> list[str]:
    """``cluster=<name>`` (other than local) on the command line goes through Hydra's launcher, which only a
    multirun uses: add ``--multirun``, so one command submits one job. A command that sweeps nothing (no ``-m``,
    no ``a,b`` values) is one run: its job runs in the run dir the same command has here (``hydra.run.dir``), so a
    run started here goes on there from where it stopped, and the other way round; a sweep's jobs get the stage's
    sweep dirs."""
    args = argv[1:]
    clusters = [a.split("=", 1)[1] for a in args if a.startswith("cluster=")]
    if not clusters or clusters[-1] == "local" or {"-m", "--multirun"} & set(args):
        return argv
    if not _sweeps(args):
        args = ["hydra.sweep.dir=${hydra.run.dir}", "hydra.sweep.subdir=.", *args]  # the command's own win
    return [argv[0], "--multirun", *args]


def _sweeps(args: list[str]) -> bool:
    """Whether the overrides sweep (``seed=1,2``, ``range(4)``, ``glob(…)``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return any(o.is_sweep_override() for o in OverridesParser.create().parse_overrides(
            [a for a in args if not a.startswith("-")]))
    except Exception:  # noqa: BLE001 - a malformed override: Hydra says what is wrong with it next
        return False


def _fault(exc: BaseException, cfg: DictConfig, run_dir: str) -> str | None:
    """A fault outside the code that ended the stage (:mod:`olmocr.faults`), in one line, or None."""
    from olmocr.faults import Unreachable, no_space, outside

    if isinstance(exc, Unreachable):
        return str(exc)
    full = no_space(exc)
    if full is not None:
        return _no_space(full, cfg, run_dir)
    named = _path_fault(exc, cfg)
    if named is not None:
        return named
    fault = outside(exc)
    if fault is None:
        return None
    # No error of s3fs says which bucket: the places the config names do.
    remote = [f"{key}={value}" for key, value in _leaves(_values(cfg))
              if isinstance(value, str) and value.startswith(("s3://", "gs://", "gcs://"))]
    return fault + (f"; the config's remote places: {', '.join(remote[:3])}{', …' if len(remote) > 3 else ''}"
                    if remote else "")


# What a path the user gave can be wrong with: what cannot be what it is asked to be (faults.MISPLACED), not
# there, not theirs to write.
PATH_ERRORS = MISPLACED | {errno.ENOENT, errno.EACCES, errno.EPERM}


def _path_fault(exc: BaseException, cfg: DictConfig) -> str | None:
    """An OS error on a file at or under a local path the config names, in one line naming the key (the
    nearest: the longest such path): the user's to fix, not a trace to read."""
    from olmocr.faults import causes

    for seen in causes(exc):
        if not (isinstance(seen, OSError) and seen.errno in PATH_ERRORS and seen.filename):
            continue
        failed = os.path.abspath(os.fsdecode(seen.filename))
        named = [(key, value) for key, value in _leaves(_values(cfg))
                 if isinstance(value, str) and value and "://" not in value and os.path.abspath(value) != "/"
                 and os.path.commonpath([failed, os.path.abspath(value)]) == os.path.abspath(value)]
        if named:
            key, value = max(named, key=lambda kv: len(os.path.abspath(kv[1])))
            return f"{key}={value}: {seen.strerror.lower()}: {os.fsdecode(seen.filename)}"
    return None


def _no_space(full, cfg: DictConfig, run_dir: str) -> str:
    """Out of disk (or quota) without saying where the write went: what is free on each file system the stage
    may write to, its run dir, the temporary folder and every local path its config names (the full one reads
    ~0 B), the fullest first."""
    import shutil
    import tempfile

    from olmocr.faults import existing_parent, free_space

    if full.filename is None and not full.outcome:
        places = {"the run dir": run_dir, "the temporary folder": tempfile.gettempdir()}
        for key, value in _leaves(_values(cfg)):
            if isinstance(value, str) and os.sep in value and "${" not in value and "://" not in value:
                places.setdefault(key, value)
        by_device: dict[int, list[str]] = {}
        for name, path in places.items():
            with contextlib.suppress(OSError):
                by_device.setdefault(os.stat(existing_parent(path)).st_dev, []).append(name)
        groups = sorted(by_device.values(), key=lambda names: shutil.disk_usage(existing_parent(places[names[0]])).free)
        full.outcome = "free: " + "; ".join(
            f"{free_space(places[names[0]])} where {', '.join(names[:3])}{', …' if len(names) > 3 else ''} "
            f"{'is' if len(names) == 1 else 'are'}" for names in groups)
    return str(full)


def _values(cfg: DictConfig) -> dict:
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - a value that no longer resolves: the others still help
        return OmegaConf.to_container(cfg, resolve=False)


def _leaves(node, prefix: str = ""):
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        name = f"{prefix}.{key}" if prefix and isinstance(key, str) else f"{prefix}[{key}]" if prefix else str(key)
        if isinstance(value, (dict, list)):
            yield from _leaves(value, name)
        else:
            yield name, value


def say_error(message: str) -> None:
    """``error: <message>`` on stderr in one write: the ranks of a distributed run share one stderr, and a line
    written in pieces (an unbuffered stream writes print's end apart) comes out tangled with another rank's."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


def say_warning(message: str) -> None:
    """``warning: <message>`` on stderr in one write (as :func:`say_error`)."""
    sys.stderr.write(f"warning: {message}\n")
    sys.stderr.flush()


def fail(message: str):
    """End the program on a user error: one line, exit code 2 (also where Hydra would print a trace)."""
    say_error(message)
    raise SystemExit(2) from None


def full_error() -> bool:
    """Whether a user's error should show where it was raised too: ``HYDRA_FULL_ERROR=1``, Hydra's own switch for
    whole traces, says so."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


@contextlib.contextmanager
def said_in_one_line():
    """A :class:`~olmocr.errors.UserError` or an :class:`~olmocr.faults.Unreachable` raised inside ends the program
    in one line (:func:`fail`), unless :func:`full_error`; any other error keeps its traceback. For launchers and
    the checks they run before a job exists, where no stage's task catches what they raise."""
    try:
        yield
    except (UserError, Unreachable) as exc:
        if full_error():
            raise
        fail(str(exc))
