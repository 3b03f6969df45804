"""Where a model comes from, and the one place that loads its processor and weights and saves them."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from typing import TYPE_CHECKING, Annotated

from olmocr.config import Matches, OneOf
from olmocr.errors import UserError
from olmocr.models.families import FAMILIES, get_family, transformers_class

if TYPE_CHECKING:
    import torch

Dtype = Annotated[str, OneOf("float32", "bfloat16", "float16")]
# transformers' attention implementations (a test keeps the names equal to its registry), paged ones
# ("paged|sdpa"), and kernels on the Hub ("kernels-community/flash-attn3", "org/repo@rev:function").
Attention = Annotated[str, Matches(r"(paged\|)?(eager|sdpa|flex_attention|flash_attention_[2-4])"
                                   r"|[\w.-]+/[\w.-]+(@[\w.-]+)?(:\w+)?",
                                   "eager, sdpa, flex_attention, flash_attention_2, _3 or _4 (paged|… for paged "
                                   "attention), or a kernel on the Hub as org/repo")]
FamilyName = Annotated[str, OneOf(*FAMILIES)]
HUB_PROBE_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


class ModelSource:
    """A model checkpoint in Hugging Face format plus how to load it.

    Subclasses only decide ``path``; loading is shared so every stage loads models the same way.
    """

    def __init__(self, family: FamilyName, dtype: Dtype = "bfloat16", attn_implementation: Attention = "sdpa",
                 image_min_pixels: int | None = None, image_max_pixels: int | None = None):
        self.family = get_family(family)
        self.dtype = dtype
        self.attn_implementation = attn_implementation
        self.image_min_pixels = image_min_pixels
        self.image_max_pixels = image_max_pixels

    # True: a hub id that loads from the local cache alone, the Hub being out of reach (HubModel.offline)
    offline = False

    @property
    def path(self) -> str:
        raise NotImplementedError

    def pretrained_kwargs(self) -> dict:
        """Extra ``from_pretrained`` arguments of this source (a hub revision, say)."""
        return {}

    def server_env(self) -> dict[str, str]:
        """Environment a model server loading :attr:`path` needs to load it as this process does."""
        return {"HF_HUB_OFFLINE": "1"} if self.offline else {}

    def processor_kwargs(self) -> dict:
        size = {}
        if self.image_min_pixels is not None:
            size["shortest_edge"] = self.image_min_pixels
        if self.image_max_pixels is not None:
            size["longest_edge"] = self.image_max_pixels
        return {"size": size} if size else {}

    def load_processor(self):
        from transformers import AutoProcessor

        kwargs = {**self.pretrained_kwargs(), **self.processor_kwargs()}
        with _loading(self.path):
            return AutoProcessor.from_pretrained(self.path, **kwargs)

    def load_model(self, device: str | torch.device = "cpu", path: str | None = None):
        """Load the weights (from ``path`` instead, e.g. a training checkpoint, when given)."""
        import torch

        model_cls = transformers_class(self.family.model_class)
        extra = {} if path else self.pretrained_kwargs()
        with _loading(path or self.path):
            model = model_cls.from_pretrained(
                path or self.path, dtype=getattr(torch, self.dtype), attn_implementation=self.attn_implementation,
                **extra)
        return model.to(device)


def save_model(model, processor, path: str, state_dict: dict | None = None) -> None:
    """The one model saver: full models and PEFT adapters alike (unwrapped from DDP), with the processor
    beside them. ``state_dict`` replaces the model's own tensors (the gathered weights of a sharded model)."""
    import torch

    model = model.module if hasattr(model, "module") else model
    if not torch.cuda.is_available():
        # save_pretrained has accelerate check for a DeepSpeed engine, which imports DeepSpeed; on a machine
        # without a GPU its accelerator probe warns of a GPU it "was unable to detect", on every CPU run. The
        # CPU is what it falls back to; named, it is taken without a word.
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    model.save_pretrained(path, **({"state_dict": state_dict} if state_dict is not None else {}))
    if processor is not None:
        processor.save_pretrained(path)


@contextlib.contextmanager
def _loading(path: str):
    """A checkpoint that cannot be read (missing files, no network for a hub id) is a one-line user error."""
    try:
        yield
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"model: cannot load {path}: {first}") from None


HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def check_name_or_path(name_or_path: str) -> None:
    """UserError naming ``model.name_or_path`` when it is neither a local folder nor a hub id."""
    if not os.path.isdir(os.path.expanduser(name_or_path)):
        if "://" in name_or_path:
            raise UserError(f"model.name_or_path: {name_or_path} is remote; copy the checkpoint to a local "
                            "folder first (transformers loads local folders and hub ids)")
        if os.path.isabs(name_or_path) or name_or_path.startswith((".", "~")) or not HUB_ID.match(name_or_path):
            raise UserError(f"model.name_or_path: {name_or_path} is not a folder (expected a checkpoint "
                            "folder in Hugging Face format, or a hub id like org/name)")


class HubModel(ModelSource):
    """A published checkpoint: a hub id (``org/name``) or a local folder in Hugging Face format."""

    def __init__(self, name_or_path: str, family: FamilyName, revision: str | None = None, dtype: Dtype = "bfloat16",
                 attn_implementation: Attention = "sdpa", image_min_pixels: int | None = None,
                 image_max_pixels: int | None = None):
        super().__init__(family, dtype, attn_implementation, image_min_pixels, image_max_pixels)
        check_name_or_path(name_or_path)  # here, when a stage builds the model source, before it reads any data
        self.name_or_path = os.path.expanduser(name_or_path)
        self.revision = revision

    @property
    def path(self) -> str:
        return self.name_or_path

    def pretrained_kwargs(self) -> dict:
        return {"revision": self.revision, **({"local_files_only": True} if self.offline else {})}

    @functools.cached_property
    def offline(self) -> bool:
        """Whether the hub id loads from the local cache alone: the Hub does not answer (a compute node
        without internet) and the cache holds the checkpoint. Asked once, with one request, where
        transformers retries each file of a checkpoint for minutes before it falls back to the cache or
        fails. UserError (one line): the Hub refuses the id, the revision or the token, or it cannot be
        reached and the cache lacks the checkpoint."""
        from huggingface_hub import constants

        if os.path.isdir(self.name_or_path) or constants.HF_HUB_OFFLINE:
            return False  # a folder; or the environment's offline mode, which transformers already honours
        import httpx
        from huggingface_hub import HfApi, try_to_load_from_cache
        from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RepositoryNotFoundError,
                                            RevisionNotFoundError)

        name = self.name_or_path
        try:
            HfApi().model_info(name, revision=self.revision, timeout=HUB_PROBE_TIMEOUT_S)
            return False
        except GatedRepoError:
            raise UserError(f"model.name_or_path: {name}: access refused; accept its terms on the Hub and set "
                            "HF_TOKEN") from None
        except RevisionNotFoundError:
            raise UserError(f"model.revision: {name} has no revision {self.revision!r}") from None
        except RepositoryNotFoundError:
            raise UserError(f"model.name_or_path: {name} is not on the Hub, or is private and HF_TOKEN is not "
                            "set") from None
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status is not None and status < 500:  # a refused token (401), a rate limit: not an outage
                raise UserError(f"model.name_or_path: {name}: the Hub answered {status}"
                                + (" (HF_TOKEN refused)" if status == 401 else "")) from None
            reason = f"the Hub answered {status or 'with an error'}"
        except (OSError, httpx.HTTPError) as exc:  # no route, no name resolution, a timeout
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no answer'}"
        if isinstance(try_to_load_from_cache(name, "config.json", revision=self.revision), str):
            log.warning("the Hub cannot be reached (%s): %s loads from the local cache", reason, name)
            return True
        raise UserError(f"model.name_or_path: {name} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) "
                        f"and the Hub cannot be reached ({reason}); download it where the Hub answers (the same "
                        "HF_HOME), or give a local folder")
