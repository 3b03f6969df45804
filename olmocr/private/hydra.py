"""Hooks into Hydra's internals (``hydra._internal``, as pinned). What Hydra's public extension points serve is done
there instead: a Callback checks a run and makes its dir before Hydra writes to it, and the local launcher is a
plugin of our own (``hydra_plugins.olmocr_launchers.local``). These four have no public counterpart: each is a
context manager that puts the original back when the block ends."""

from __future__ import annotations

from olmocr.private import Hook

import contextlib
import sys
from collections.abc import Callable, Sequence

HOOKS = {
    "mode_from_command_line": Hook(
        "hydra._internal.hydra.Hydra.get_mode", ("self", "config_name", "overrides"),
        "Hydra composes the whole config once more before every run only to read hydra.mode, and no hook runs "
        "before that"),
    "on_override_failure": Hook(
        "hydra._internal.config_loader_impl.ConfigLoaderImpl._apply_overrides_to_config", ("overrides", "cfg"),
        "Hydra applies all overrides at once and says which failed only in its message; no callback runs during "
        "composition"),
    "on_missing_option": Hook(
        "hydra._internal.config_loader_impl.ConfigLoaderImpl.load_configuration", (),
        "an unknown group option is raised from inside composition, before any callback"),
    "batch_checked_by_launcher": Hook(
        "hydra._internal.core_plugins.basic_sweeper.BasicSweeper.validate_batch_is_legal", ("self", "batch"),
        "the basic sweeper composes every job before its launcher gets the batch, and a launcher plugin cannot tell "
        "it not to"),
}


@contextlib.contextmanager
def mode_from_command_line(args: Sequence[str]):
    """Unless the command line names ``hydra.mode``, the run's mode is what ``-m`` says (no config of this project
    sets it): each stage starts ~0.4 s sooner."""
    from hydra._internal.hydra import Hydra

    if any(a.lstrip("+~").startswith("hydra.mode=") for a in args):
        yield
        return
    original = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: None
    try:
        yield
    finally:
        Hydra.get_mode = original


@contextlib.contextmanager
def on_override_failure(handle: Callable[[object, object, BaseException], None]):
    """Overrides applied one at a time, in order, as Hydra applies them; ``handle(override, cfg, exc)`` is called
    with the one that failed (it may raise its own error; when it returns, Hydra's goes on)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    original = ConfigLoaderImpl._apply_overrides_to_config

    def apply(overrides, cfg) -> None:
        for override in overrides:
            try:
                original([override], cfg)
            except Exception as exc:  # noqa: BLE001 - handed to the caller, raised again when it returns
                handle(override, cfg, exc)
                raise

    ConfigLoaderImpl._apply_overrides_to_config = staticmethod(apply)
    try:
        yield
    finally:
        ConfigLoaderImpl._apply_overrides_to_config = staticmethod(original)


@contextlib.contextmanager
def on_missing_option(handle: Callable[[str, str], None]):
    """``handle(group, option)`` is called when composition meets an option a config group does not have (it may
    raise its own error; when it returns, Hydra's goes on)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.errors import MissingConfigException

    original = ConfigLoaderImpl.load_configuration

    def load(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        except MissingConfigException as exc:
            group, _, option = (exc.missing_cfg_file or "").rpartition("/")
            if group:
                handle(group, option)
            raise

    ConfigLoaderImpl.load_configuration = load
    try:
        yield
    finally:
        ConfigLoaderImpl.load_configuration = original


@contextlib.contextmanager
def batch_checked_by_launcher():
    """A launcher that composes and checks every job itself before it starts or submits any (its class says
    ``checks_every_job = True``) gets its batch without the sweeper composing each job first, which doubled the
    time to submit (a 128-replica array: 0.45 s a job)."""
    sweeper = _scanned("hydra._internal.core_plugins.basic_sweeper").BasicSweeper

    def validate_batch_is_legal(self, batch):
        if not getattr(self.launcher, "checks_every_job", False):
            super(sweeper, self).validate_batch_is_legal(batch)

    sweeper.validate_batch_is_legal = validate_batch_is_legal
    try:
        yield
    finally:
        del sweeper.validate_batch_is_legal


def _scanned(module: str):
    """``module`` of a Hydra core plugin as it will run: Hydra's plugin scan executes its plugins' modules again
    (the first time it is asked for one), which would undo a change made before it."""
    from hydra.core.plugins import Plugins

    Plugins.instance()
    return sys.modules[module]
