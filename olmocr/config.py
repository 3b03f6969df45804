"""Config machinery: schemas generated from signatures, validation, building.

Schemas for ``_target_`` nodes are generated from the target's own signature, so a builder and its
schema cannot drift apart. Each stage keeps its own schemas in ``olmocr/<stage>/schema.py``, which puts
them in Hydra's ConfigStore when imported; YAML options name their schema in their defaults list, which
makes an unknown key or a wrong type a compose-time error naming the key. Entries of free-form maps (the
data steps, data sources) are checked by :func:`validate`, which every stage runs before any work.
Builder modules import their heavy libraries (torch, transformers) when called, not when imported, so
composing, validating and ``--help`` stay fast.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from olmocr.errors import UserError

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONF_DIR = os.path.join(PROJECT_ROOT, "conf")

NAME_MAX = 255  # bytes in one file name, on every common Linux file system


def job_dirname(overrides: str) -> str:
    """A sweep job's folder from its overrides (Hydra's ``job.override_dirname``): as they read while each part
    between slashes fits in a file name; else, so that a job with many or long overrides runs at all, their
    first 200 characters with slashes made underscores and a hash of the whole, the same for the same command
    (which resumes there) and different for any other."""
    if all(len(part.encode()) <= NAME_MAX for part in overrides.split("/")):
        return overrides
    digest = hashlib.sha1(overrides.encode()).hexdigest()[:12]
    return f"{overrides.replace('/', '_').encode()[:200].decode(errors='ignore')}-{digest}"


OmegaConf.register_new_resolver("olmocr.root", lambda: PROJECT_ROOT, replace=True)
OmegaConf.register_new_resolver("olmocr.expand", lambda path: os.path.expanduser(path), replace=True)
OmegaConf.register_new_resolver("olmocr.job_dirname", job_dirname, replace=True)


class Constraint:
    """What a value must be beyond its type, declared where the value is: on a builder's parameter or a
    schema's field, as ``Annotated[float, Range(above=0)]``. :func:`validate` checks every declared one (each
    element of a list) before any work; null always passes (it means what the key's comment says)."""

    def holds(self, value) -> bool:
        raise NotImplementedError

    def check(self, key: str, value) -> None:
        for item in value if isinstance(value, (list, tuple, ListConfig)) else [value]:
            if item is not None and not self.holds(item):
                shown = f"{item:g}" if isinstance(item, float) else repr(item) if isinstance(item, str) else item
                raise UserError(f"{key}: {self}, got {shown}")


@dataclass(frozen=True)
class Range(Constraint):
    """A number's bounds: ``above``/``below`` exclude the bound, ``at_least``/``at_most`` include it; ``null``
    says in the error what null means where null is allowed."""

    above: float | None = None
    at_least: float | None = None
    below: float | None = None
    at_most: float | None = None
    null: str | None = None

    def holds(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return not ((self.above is not None and value <= self.above)
                    or (self.at_least is not None and value < self.at_least)
                    or (self.below is not None and value >= self.below)
                    or (self.at_most is not None and value > self.at_most))

    def __str__(self) -> str:
        low = f"({self.above:g}" if self.above is not None else f"[{self.at_least:g}" if self.at_least is not None else ""
        high = f"{self.below:g})" if self.below is not None else f"{self.at_most:g}]" if self.at_most is not None else ""
        if low and high:
            text = f"in {low}, {high}"
        elif self.above == 0:
            text = "positive"
        else:
            words = {"above": self.above, "at least": self.at_least, "below": self.below, "at most": self.at_most}
            text = next(f"{word} {bound:g}" for word, bound in words.items() if bound is not None)
        return f"must be {text}" + (f", or null for {self.null}" if self.null else "")


@dataclass(frozen=True)
class OneOf(Constraint):
    """A value from a fixed set of choices."""

    choices: tuple

    def __init__(self, *choices):
        object.__setattr__(self, "choices", choices)

    def holds(self, value) -> bool:
        return value in self.choices

    def __str__(self) -> str:
        return f"expected one of {', '.join(map(str, self.choices))}"


@dataclass(frozen=True)
class Matches(Constraint):
    """A string of a given form: ``pattern`` (a regular expression) matches it whole; ``what`` says the form."""

    pattern: str
    what: str

    def holds(self, value) -> bool:
        return isinstance(value, str) and re.fullmatch(self.pattern, value) is not None

    def __str__(self) -> str:
        return f"expected {self.what}"


# The bounds most often declared
Positive = typing.Annotated[float, Range(above=0)]
NonNegative = typing.Annotated[float, Range(at_least=0)]


@functools.cache
def constraints(schema: type) -> dict[str, Constraint]:
    """The :class:`Constraint` declared on each field of a schema (a dataclass)."""
    hints = typing.get_type_hints(schema, include_extras=True)
    return {name: c for name, hint in hints.items() for c in getattr(hint, "__metadata__", ())
            if isinstance(c, Constraint)}


def _omegaconf_type(annotation):
    """Map a signature annotation onto a type OmegaConf can enforce (Any where it cannot); a
    :class:`Constraint` stays on it."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extras = typing.get_args(annotation)
        kept = tuple(e for e in extras if isinstance(e, Constraint))
        return typing.Annotated[(_omegaconf_type(inner), *kept)] if kept else _omegaconf_type(inner)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = _omegaconf_type(args[0]) if len(args) == 1 else Any
        return Optional[inner] if type(None) in typing.get_args(annotation) else inner
    if annotation in (int, float, str, bool):
        return annotation
    if origin in (list, list) or annotation is list:
        args = typing.get_args(annotation)
        return list[_omegaconf_type(args[0]) if args else Any]
    if origin in (dict, dict) or annotation is dict:
        args = typing.get_args(annotation)
        return dict[str, _omegaconf_type(args[1]) if args else Any]
    return Any


def locate(path: str):
    """Import ``package.module.Name``; UserError naming the path when it does not exist."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            break
        return obj
    raise UserError(f"cannot import {path!r}")


def runtime(*names: str):
    """Declare the parameters of a builder (a class or function a config's ``_target_`` names) that the stage
    hands it when it builds it, such as the model or a server: they are no config keys, so the builder's
    schema leaves them out, and :func:`build` passes them."""

    def declare(target):
        params = inspect.signature(target).parameters
        assert set(names) <= set(params), f"{target.__qualname__} takes no {sorted(set(names) - set(params))}"
        target.__runtime_parameters__ = frozenset(names)
        return target

    return declare


def runtime_parameters(target) -> frozenset[str]:
    """What :func:`runtime` declared of ``target`` (only its own declaration, not an ancestor's)."""
    return vars(target).get("__runtime_parameters__", frozenset())


def build(node, **objects):
    """``hydra.utils.instantiate`` with the run-time ``objects`` (a processor, the model, …) that the target
    declares (:func:`runtime`) passed to it."""
    from hydra.utils import instantiate

    node = {k: v for k, v in (node.items() if isinstance(node, dict) else OmegaConf.to_container(node).items())
            if k != "_after_"}
    declared = runtime_parameters(locate(node["_target_"]))
    # Run-time objects are passed to the built partial, not through Hydra, which would copy them or
    # instantiate `_target_`s found inside them.
    factory = instantiate(node, _partial_=True)
    return factory(**{k: v for k, v in objects.items() if k in declared})


def schema_for(target: str | type) -> type:
    """A dataclass with ``_target_`` and one field per constructor parameter of ``target``."""
    return _schema_for_object(locate(target) if isinstance(target, str) else target)


def reward_schema(target: str) -> type:
    """A reward entry: its ``weight`` and the reward function's keyword-only parameters (its options;
    the other parameters are the completions and dataset columns trl passes at call time)."""
    return _schema_for_object(locate(target), reward=True)


def _parameter_types(func) -> dict[str, Any]:
    """Parameter annotations, evaluated one by one: an annotation naming a library the module imports
    only when called (``nn.Module``) is a run-time parameter's, and counts as Any."""
    out = {}
    for name, annotation in getattr(func, "__annotations__", {}).items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, func.__globals__)  # noqa: S307 - the module's own annotation
            except (NameError, AttributeError, TypeError):
                annotation = Any
        out[name] = annotation
    return out


@functools.cache
def _schema_for_object(obj, reward: bool = False) -> type:
    path = f"{obj.__module__}.{obj.__qualname__}"
    func = obj.__init__ if inspect.isclass(obj) else obj
    hints = _parameter_types(func)
    specs: list = [("_target_", str, field(default=path))]
    if reward:
        specs.append(("weight", float, field(default=1.0)))
    for name, param in inspect.signature(obj).parameters.items():
        if name in runtime_parameters(obj) or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if reward and param.kind is not param.KEYWORD_ONLY:
            continue
        kind = _omegaconf_type(hints.get(name, Any))
        default = MISSING if param.default is inspect.Parameter.empty else param.default
        if isinstance(default, (list, dict)):
            default = field(default_factory=lambda value=default: value)
        else:
            default = field(default=default)
        specs.append((name, kind, default))
    return dataclasses.make_dataclass(f"{obj.__name__}Config", specs)


@dataclass
class PathsConfig:
    cache: str = "${olmocr.expand:${oc.env:OLMOCR_CACHE,'~/.cache/olmocr'}}"
    sample_data: str = "${olmocr.root:}/data/sample"
    # Where python -m olmocr.datasets puts the published datasets, and where training and bench read them.
    datasets: str = "${olmocr.expand:${oc.env:OLMOCR_DATASETS,${paths.cache}/datasets}}"
    olmocr_mix: str = "${oc.env:OLMOCR_MIX_DIR,${paths.datasets}/olmOCR-mix-1025}"
    olmocr_mix_0225: str = "${paths.datasets}/olmOCR-mix-0225"
    olmocr_bench: str = "${oc.env:OLMOCR_BENCH_DIR,${paths.datasets}/olmOCR-bench}"
    synthmix: str = "${oc.env:OLMOCR_SYNTHMIX_DIR,${paths.datasets}/olmOCR-synthmix-1025}"
    # Reading pages (python -m olmocr.synth reading=…; scripts/reader.sh makes them): train/ and heldout/.
    reading: str = "${oc.env:OLMOCR_READING_DIR,outputs/reading}"
    # Where a pipeline run without workspace= converts the bundled eval PDFs; stats, export and the viewer
    # read it by default.
    sample_workspace: str = "outputs/pipeline/sample"


@dataclass
class AccessConfig:
    """How s3:// paths are reached (a workspace, PDFs, a dataset snapshot); null: the environment's (AWS_PROFILE,
    AWS_ENDPOINT_URL, the default credentials). An explicit endpoint, then AWS_ENDPOINT_URL, then the
    profile's own endpoint_url, in that order."""

    profile: str | None = None  # a named profile of ~/.aws/config and ~/.aws/credentials
    endpoint: str | None = None  # an S3 API endpoint: MinIO, Ceph, …


@dataclass
class StageConfig:
    """What every stage's config has: shared paths, ``dry_run`` (validate, print, do nothing; with a cluster: write
    the job's script or spec and submit nothing) and ``wait`` (a job submitted to a cluster: wait for it to end;
    otherwise the command returns once it is submitted)."""

    paths: PathsConfig = field(default_factory=PathsConfig)
    dry_run: bool = False
    wait: bool = False


def store(name: str, node, group: str | None = None) -> None:
    """Put a schema in Hydra's ConfigStore (``olmocr/<stage>/schema.py`` modules call this on import)."""
    ConfigStore.instance().store(name=name, node=node, group=group)


def register_schemas() -> None:
    """Import every stage's ``schema`` module, so any primary config composes (tests, notebooks).
    A stage's entry point imports only its own."""
    import olmocr

    for info in pkgutil.iter_modules(olmocr.__path__):
        if info.ispkg and importlib.util.find_spec(f"olmocr.{info.name}.schema") is not None:
            importlib.import_module(f"olmocr.{info.name}.schema")


def _target_nodes(node, path: str = ""):
    if node._is_none() or node._is_missing():
        return
    if isinstance(node, DictConfig):
        if "_target_" in node:
            yield path, node
        for key in node.keys():
            child = node._get_node(key)
            if isinstance(child, (DictConfig, ListConfig)):
                yield from _target_nodes(child, f"{path}.{key}" if path else str(key))
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            child = node._get_node(i)
            if isinstance(child, (DictConfig, ListConfig)):
                yield from _target_nodes(child, f"{path}[{i}]")


# Maps whose entries share one schema but must stay open to new keys (+data.train.mine={…}): path ->
# function of the whole config giving (entry schema, what to call it in errors, an example entry).
TYPED_MAP_ENTRIES: dict[str, Callable[[DictConfig], tuple[type, str, str]]] = {}


def _check_against(schema: type, node, path: str, what: str) -> DictConfig:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
    except OmegaConfBaseException as exc:
        key = f"{path}.{exc.key}" if getattr(exc, "key", None) else path
        raise UserError(f"{key}: {str(exc).splitlines()[0]} ({what})") from None
    missing = list(OmegaConf.missing_keys(merged))
    if missing:
        raise UserError(f"{path}: missing required key(s) {', '.join(missing)} ({what})")
    check_constraints(merged, schema, path)
    return merged


def check_constraints(node: DictConfig | dict, schema: type, path: str) -> None:
    """Every :class:`Constraint` that ``schema`` declares, on the values ``node`` holds; ``path`` prefixes the
    keys named in errors."""
    for name, constraint in constraints(schema).items():
        if name in node:
            constraint.check(f"{path}.{name}" if path else name, node[name])


def _schema_nodes(node: DictConfig, path: str = ""):
    """Every mapping under ``node`` with its path and its schema (a dataclass, or None for a plain map)."""
    if node._is_none() or node._is_missing() or node._is_interpolation():
        return
    kind = OmegaConf.get_type(node)
    yield path, node, kind if dataclasses.is_dataclass(kind) else None
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            yield from _schema_nodes(child, f"{path}.{key}" if path else str(key))


def _unknown_keys(cfg: DictConfig):
    """Keys of schema-typed nodes that their schema lacks, with the schema's fields: Hydra adds a key given
    as ``+trainer.batch_sise=…`` (what its own error for ``trainer.batch_sise=…`` suggests) without a word."""
    for path, node, schema in _schema_nodes(cfg):
        if schema is None:
            continue
        fields = {f.name for f in dataclasses.fields(schema)}
        for key in node.keys():
            if key not in fields:
                yield f"{path}.{key}" if path else str(key), schema, fields


def validate(cfg: DictConfig) -> DictConfig:
    """Check every ``_target_`` node against its target's signature, and every value against what its schema
    or signature declares of it (:class:`Constraint`); raise ValueError naming the key.

    Also rejects keys a schema lacks, resolves every interpolation, so a bad ``${…}`` fails here rather
    than mid-run, and requires every ``???`` value to be given.
    """
    for where, kind, fields in _unknown_keys(cfg):
        leaf = where.rsplit(".", 1)[-1]
        close = difflib.get_close_matches(leaf, sorted(fields), n=1)
        hint = f"did you mean {where[:-len(leaf)]}{close[0]}?" if close else f"its keys: {', '.join(sorted(fields))}"
        raise UserError(f"{where}: no such key in {kind.__name__} ({hint})")
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as exc:
        raise UserError(f"config: {exc.msg if hasattr(exc, 'msg') else exc}") from None
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise UserError(f"{', '.join(missing)}: required, give {missing[0]}=…")
    for path, node, schema in _schema_nodes(cfg):
        if schema is not None and "_target_" not in node:  # a target's values: below, by its signature
            check_constraints(node, schema, path)
    for path, node in _target_nodes(cfg):
        try:
            schema = reward_schema(node._target_) if path.startswith("rewards.") else schema_for(node._target_)
        except ValueError as exc:
            raise UserError(f"{path}._target_: {exc}") from None
        # `_after_` positions a data step (olmocr.data.chain.step_order); `_recursive_` is Hydra's
        # (a target that builds its own nested targets); neither is a constructor argument.
        params = {k: node._get_node(k) for k in node.keys() if k not in ("_after_", "_recursive_")}
        _check_against(schema, OmegaConf.create(params), path, f"target {node._target_}")
    for path, schema_of in TYPED_MAP_ENTRIES.items():
        entries = OmegaConf.select(cfg, path)
        if not isinstance(entries, DictConfig):
            continue
        schema, what, example = schema_of(cfg)
        for name in entries:
            entry = entries._get_node(name)
            if not isinstance(entry, DictConfig):
                raise UserError(f"{path}.{name}: expected a mapping like {example}, got {entry!r}")
            # Written back with its defaults filled in, so readers see a complete entry.
            entries[name] = _check_against(schema, entry, f"{path}.{name}", what)
    return cfg


def compose(config_name: str, overrides: list[str] | None = None) -> DictConfig:
    """Compose a primary config outside ``@hydra.main`` (tests, notebooks), validated."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_schemas()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = hydra_compose(config_name=config_name, overrides=overrides or [])
    return validate(cfg)
