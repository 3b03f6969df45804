"""Each hook into a library's private internals (olmocr.private) against the pinned library: a version that renames
or reshapes what a hook replaces fails here, naming the hook, before a run depends on it. (What each hook does is
tested where it serves: one-line config errors, the SLURM launcher, GRPO's colocated engine, resumed runs.)"""

import importlib
import inspect
import pkgutil

import pytest

import olmocr.private


def hooks():
    for info in pkgutil.iter_modules(olmocr.private.__path__):
        module = importlib.import_module(f"olmocr.private.{info.name}")
        for name, hook in module.HOOKS.items():
            marks = [pytest.mark.vllm] if info.name == "vllm" else []  # importing vLLM takes 15 s of CPU
            yield pytest.param(f"{module.__name__}.{name}", hook, marks=marks, id=f"{info.name}.{name}")


def private_attribute(path: str):
    """``package.module.Class.name``: the longest importable module, then attributes."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            found = getattr(found, name)
        return found
    raise ImportError(path)


def is_subsequence(needed, given) -> bool:
    rest = iter(given)
    return all(name in rest for name in needed)


@pytest.mark.parametrize("hook_name, hook", list(hooks()))
def test_each_private_hook_meets_what_the_pinned_library_has(hook_name, hook):
    assert hook.why, f"{hook_name}: say why no public extension point serves"
    try:
        replaced = private_attribute(hook.replaces)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{hook_name}: the pinned library has no {hook.replaces} any more ({exc})")
    parameters = list(inspect.signature(replaced).parameters)
    assert is_subsequence(hook.needs, parameters), (
        f"{hook_name}: {hook.replaces} takes {parameters}, and the hook relies on {list(hook.needs)}")


def test_the_hydra_hooks_put_the_originals_back():
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra

    from olmocr.private import hydra as hydra_hooks

    def originals():
        return (Hydra.get_mode, ConfigLoaderImpl.__dict__["_apply_overrides_to_config"].__func__,
                ConfigLoaderImpl.load_configuration)

    before = originals()
    with (hydra_hooks.mode_from_command_line([]), hydra_hooks.on_override_failure(print),
          hydra_hooks.on_missing_option(print), hydra_hooks.batch_checked_by_launcher()):
        assert all(now is not then for now, then in zip(originals(), before))
    assert originals() == before
    sweeper = importlib.import_module("hydra._internal.core_plugins.basic_sweeper").BasicSweeper
    assert "validate_batch_is_legal" not in sweeper.__dict__


def test_nothing_outside_the_private_package_touches_a_hooked_attribute():
    """Every private attribute a hook replaces is named in its hook's module alone (and in no other module)."""
    import os
    import re

    from olmocr.config import PROJECT_ROOT

    names = {path.rsplit(".", 1)[1] for _, hook in (p.values for p in hooks()) for path in [hook.replaces]
             if path.rsplit(".", 1)[1].startswith("_") and path.rsplit(".", 1)[1] != "__init__"}
    for folder in ("olmocr", "launchers"):
        for root, _, files in os.walk(os.path.join(PROJECT_ROOT, folder)):
            if os.path.basename(root) == "private":
                continue
            for name in files:
                if name.endswith(".py"):
                    text = open(os.path.join(root, name), encoding="utf-8").read()
                    used = sorted(n for n in names if re.search(rf"\.{re.escape(n)}\b", text))
                    assert not used, f"{os.path.join(root, name)} names {used}: hooks live in olmocr/private/"
