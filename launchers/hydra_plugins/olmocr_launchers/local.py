"""``hydra/launcher=olmocr_local`` (``cluster=local``): a sweep's jobs run here one after another, as Hydra's basic
launcher runs them, with every job's config checked before the first starts (a bad value in the last job was
found after the others had run, hours of training) and each job's dir prepared as a single run's is (checked,
not held by a running stage, made) before Hydra writes there."""

# No `from __future__ import annotations`: Hydra's plugin scan runs this module outside sys.modules, where a
# dataclass cannot resolve annotations given as strings.
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import open_dict

from olmocr.cli import counted, job_dir, prepare_job, said_in_one_line

log = logging.getLogger(__name__)


@dataclass
class OlmocrLocalLauncherConf:
    _target_: str = "hydra_plugins.olmocr_launchers.local.OlmocrLocalLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="olmocr_local", node=OlmocrLocalLauncherConf, provider="olmocr")


class OlmocrLocalLauncher(Launcher):
    checks_every_job = True  # launch() composes every job before it starts any (olmocr.private.hydra)

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        stage = getattr(self.task_function, "stage", None)  # what a declared stage checks (olmocr.cli)
        configs = []
        for idx, overrides in enumerate(counted(job_overrides), start=initial_job_idx):
            config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(config):
                config.hydra.job.id = config.hydra.job.num = idx
            if stage is not None and len(job_overrides) > 1:
                with said_in_one_line():
                    stage.check_job(config)
            configs.append(config)
        log.info("Launching %d jobs locally", len(configs))
        runs = []
        for config, overrides in zip(configs, job_overrides):
            log.info("\t#%d : %s", config.hydra.job.num, " ".join(filter_overrides(overrides)))
            prepare_job(stage, config, job_dir(config, "hydra.sweep.dir", "hydra.sweep.subdir"))
            runs.append(run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=config,
                                job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir"))
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return runs
