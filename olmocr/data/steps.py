"""Per-sample steps. Each is a small callable ``step(sample) -> sample`` configured by keyword arguments.

A sample is a plain dict that the steps fill in: ``md_path``/``pdf_path`` (and ``page``, 1 when absent)
to start with (the batch pipeline's image documents come as ``image_bytes`` instead, ``pdf_path`` then
naming the image), then ``meta`` and ``text``, ``image``, ``anchor_text``, ``prompt``, ``target``,
``messages`` and finally the model inputs. A step that cannot or should not produce a training example raises
:class:`Reject` with a short reason; the dataset counts reasons and reports the rejected files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Annotated

from olmocr.config import OneOf, Range, runtime
from olmocr.data import text_rules
from olmocr.errors import UserError
from olmocr.formats import structure
from olmocr.formats.prompts import BLOCKS, PROMPT_VERSIONS, answer_format, build_prompt
from olmocr.formats.structure import format_blocks
from olmocr.formats.frontmatter import FrontMatterError, parse_document, to_json_target, write_document
from olmocr.formats.image import ImageError, render_image
from olmocr.formats.pdf import PdfError, anchor_text, pdf_info, pdf_page_size
from olmocr.formats.render import RenderError, render_page
from olmocr.utils.io import read_bytes, read_text

IGNORE_INDEX = -100
Probability = Annotated[float, Range(at_least=0, at_most=1)]


class Reject(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def control_token_in(text: str, tokens) -> str | None:
    """The first of ``tokens`` (a tokenizer's special tokens) that ``text`` spells out, if any. A target
    holding one would be tokenized as that control token: a stray end of turn, or an image placeholder
    with no image behind it, which stops training on a features/tokens mismatch."""
    return next((token for token in tokens if token and token in text), None)


class Step:
    # The settings of this step that make what a model sees, which a trained model carries in its folder
    # (olmocr.data.presented) and every stage that loads it presents its pages with.
    presents: tuple[str, ...] = ()

    def __call__(self, sample: dict) -> dict:
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items()
                           if isinstance(v, (bool, int, float, str, type(None))))
        return f"{type(self).__name__}({fields})"


@runtime("storage_wait_s")
class ParseFrontMatter(Step):
    """Read the .md beside the PDF and split it into typed front matter and page text. ``storage_wait_s``
    (training: ``data.storage_wait_s``): how long a remote read waits out storage that does not answer, rather
    than dropping the page (:func:`olmocr.utils.io.read_bytes`)."""

    def __init__(self, storage_wait_s: float = 0.0):
        self.storage_wait_s = storage_wait_s

    def __call__(self, sample):
        if sample.get("md_path") is None:
            raise Reject("missing_md", f"{sample.get('pdf_path')} has no .md beside it")
        try:
            sample["meta"], sample["text"] = parse_document(read_text(sample["md_path"], wait_s=self.storage_wait_s))
        except FrontMatterError as exc:
            raise Reject("front_matter", f"{sample['md_path']}: {exc}") from None
        except (UnicodeDecodeError, OSError) as exc:
            raise Reject("unreadable_md", f"{sample['md_path']}: {exc}") from None
        return sample


@runtime("storage_wait_s")
class CheckPdf(Step):
    """Open the PDF's structure (no rendering): reject missing, empty, encrypted, unreadable or
    multi-page files before any expensive step. Keeps the bytes for later steps; reads them as
    :class:`ParseFrontMatter` reads the .md.

    A caller that has already opened the document for all its pages (the batch pipeline) passes
    ``pdf_bytes``, ``num_pages`` and ``page_size`` in the sample, and the PDF is not parsed again."""

    def __init__(self, max_pages: int | None = 1, storage_wait_s: float = 0.0):
        self.max_pages = max_pages
        self.storage_wait_s = storage_wait_s

    def __call__(self, sample):
        path = sample.get("pdf_path")
        if path is None:
            raise Reject("missing_pdf", f"{sample.get('md_path')} has no .pdf beside it")
        page = sample.get("page", 1)
        if sample.get("image_bytes") is not None:  # an image document: its caller read its frames
            if not 1 <= page <= sample["num_pages"]:
                raise Reject("missing_page", f"{path} has no page {page} (it has {sample['num_pages']})")
            return sample
        data, num_pages, size = sample.get("pdf_bytes"), sample.get("num_pages"), sample.get("page_size")
        try:
            if data is None or num_pages is None:
                data = read_bytes(path, wait_s=self.storage_wait_s)
                info = pdf_info(path, data)
                num_pages, size = info.num_pages, (info.width, info.height) if page == 1 else None
            if self.max_pages is not None and num_pages > self.max_pages:
                raise Reject("too_many_pages", f"{path} has {num_pages} pages (at most {self.max_pages})")
            if not 1 <= page <= num_pages:
                raise Reject("missing_page", f"{path} has no page {page} (it has {num_pages})")
            sample["pdf_bytes"] = data
            sample["page_size"] = size or pdf_page_size(path, page, data)
        except FileNotFoundError:
            raise Reject("missing_pdf", f"{path} does not exist") from None
        except PdfError as exc:
            raise Reject(exc.reason, str(exc)) from None
        return sample


class DropRotated(Step):
    """Drop pages whose front matter says the page is not upright."""

    def __call__(self, sample):
        meta = sample["meta"]
        if not meta.is_rotation_valid or meta.rotation_correction:
            raise Reject("rotated", f"{sample['md_path']}: rotation_correction={meta.rotation_correction}")
        return sample


@runtime("render_cache")
class RenderPage(Step):
    """The page as an image whose longest side is ``longest_side`` pixels. ``render_cache`` (training:
    ``data.render_cache``) is a folder where renders are kept (:mod:`olmocr.data.render_cache`): a page whose
    bytes were rendered at this size before is read from there, pixel for pixel what rendering it gives."""

    presents = ("longest_side",)

    def __init__(self, longest_side: Annotated[int, Range(at_least=16)] = 1288, render_cache: str | None = None,
                 max_aspect: Annotated[float, Range(at_least=1)] = 200.0):
        """``max_aspect``: a page longer than this many times its width (or wider than its length) is not
        rendered (``Reject``): a sliver no model reads, whose image vision processors refuse (Qwen2-VL's and
        its successors' above 200)."""
        from olmocr.data.render_cache import RenderCache

        self.longest_side = longest_side
        self.max_aspect = max_aspect
        self.cache = RenderCache(render_cache) if render_cache else None

    def _sliver(self, sample, size) -> None:
        width, height = size
        if min(width, height) <= 0 or max(width, height) / min(width, height) > self.max_aspect:
            raise Reject("sliver_page", f"{sample.get('pdf_path')} page {sample.get('page', 1)} is {width:g} x "
                                        f"{height:g}: more than {self.max_aspect:g} times as long as it is wide "
                                        "(render.max_aspect)")

    def __call__(self, sample):
        page = sample.get("page", 1)
        if sample.get("page_size") is not None:
            self._sliver(sample, sample["page_size"])
        kept = None
        if self.cache is not None and sample.get("pdf_bytes") is not None and sample.get("image_bytes") is None:
            kept = self.cache.path(sample["pdf_bytes"], page, self.longest_side)
            image = self.cache.get(kept)
            if image is not None:
                sample["image"] = image
                return sample
        try:
            if sample.get("image_bytes") is not None:
                sample["image"] = render_image(sample["pdf_path"], sample["image_bytes"], page, self.longest_side)
            else:
                sample["image"] = render_page(sample["pdf_path"], page, self.longest_side, sample.get("page_size"),
                                              sample.get("pdf_bytes"))
        except (RenderError, ImageError) as exc:
            raise Reject("render_failed", str(exc)) from None
        self._sliver(sample, sample["image"].size)
        if kept is not None:
            self.cache.put(kept, sample["image"])
        return sample


class BlankImage(Step):
    """A white image of the rendered page's size in its place: the blind control of a reading experiment
    (``+data.steps.blind={_target_: olmocr.data.steps.BlankImage, _after_: render}``). The prompt, the image
    tokens and the target are the page's own; only what the model could see is gone, so whatever a model
    trained on it scores is what the text alone can teach."""

    def __call__(self, sample):
        from PIL import Image

        sample["image"] = Image.new("RGB", sample["image"].size, "white")
        return sample


class RotationAugmentation(Step):
    """Turn upright pages by 90, 180 or 270 degrees clockwise, with the front matter updated to match.

    ``rotation_correction`` is the clockwise turn that makes the page upright again.
    """

    def __init__(self, probability: Probability = 0.5):
        self.probability = probability

    def __call__(self, sample):
        meta = sample["meta"]
        rng = sample["rng"]
        if meta.rotation_correction or not meta.is_rotation_valid or rng.random() >= self.probability:
            return sample
        turn = rng.choice((90, 180, 270))
        # PIL rotates counter-clockwise; a clockwise turn of `turn` degrees is rotate(-turn).
        sample["image"] = sample["image"].rotate(-turn, expand=True, fillcolor="white")
        sample["meta"] = dataclasses.replace(meta, is_rotation_valid=False, rotation_correction=(360 - turn) % 360)
        return sample


class AnchorText(Step):
    def __init__(self, max_chars: int = 4000):
        self.max_chars = max_chars

    def __call__(self, sample):
        if sample.get("image_bytes") is not None:  # no text layer: the page's size is all there is
            width, height = sample["page_size"]
            sample["anchor_text"] = f"Page dimensions: {float(width):.1f}x{float(height):.1f}"
            return sample
        try:
            sample["anchor_text"] = anchor_text(sample["pdf_path"], sample.get("page", 1), self.max_chars,
                                                sample.get("pdf_bytes"))
        except PdfError as exc:
            raise Reject(exc.reason, str(exc)) from None
        return sample


class NormalizeLatex(Step):
    """$$…$$ → \\[…\\], $…$ → \\(…\\), and \\textbf/\\textit/\\emph → markdown outside math."""

    def __call__(self, sample):
        sample["text"] = text_rules.normalize_latex(sample["text"])
        return sample


class RuleFilter(Step):
    """Drop targets that break the output conventions the model is taught."""

    def __init__(self, markdown_tables: bool = True, malformed_html_tables: bool = True,
                 latex_outside_math: bool = True):
        self.markdown_tables = markdown_tables
        self.malformed_html_tables = malformed_html_tables
        self.latex_outside_math = latex_outside_math

    def __call__(self, sample):
        text = sample["text"]
        where = sample.get("md_path")
        if self.markdown_tables and text_rules.has_markdown_table(text):
            raise Reject("markdown_table", f"{where}: tables must be HTML")
        if self.malformed_html_tables:
            error = text_rules.html_table_error(text)
            if error:
                raise Reject("malformed_html_table", f"{where}: {error}")
        if self.latex_outside_math and text_rules.has_latex_outside_math(text):
            raise Reject("latex_outside_math", f"{where}: LaTeX command outside \\( \\) or \\[ \\]")
        return sample


class AnnotateTables(Step):
    """Tell the model each HTML table's shape in the target text, before it writes the rows.

    ``annotate_dims`` adds ``data-totalrows="R" data-totalcols="C"`` to each ``<table>`` tag (R, C: the
    grid with spans laid out; a tag that already has them is left alone). ``firstrowpreview`` puts
    ``<!-- Sample row (i): Column 1: …, Column 2: … -->`` right after the tag, from the first row with a
    cell starting in every column (values cut to 50 characters). Tables whose spans cannot be laid out
    are left as they are."""

    _TABLE = re.compile(r"<table\b([^>]*)>.*?</table>", re.I | re.S)

    def __init__(self, mode: Annotated[str, OneOf("annotate_dims", "firstrowpreview")] = "annotate_dims"):
        self.mode = mode

    def _annotate(self, match: re.Match) -> str:
        from olmocr.formats.tables import MalformedTable, html_tables

        whole, attrs = match.group(0), match.group(1)
        try:
            tables = html_tables(whole)
        except MalformedTable:
            return whole
        if not tables:
            return whole
        table, tag_end = tables[0], match.start(1) - match.start() + len(attrs)
        if self.mode == "annotate_dims":
            if "data-totalrows" in attrs.lower():
                return whole
            dims = f' data-totalrows="{len(table.grid)}" data-totalcols="{len(table.grid[0])}"'
            return whole[:tag_end] + dims + whole[tag_end:]
        width = len(table.grid[0])
        for r, line in enumerate(table.grid):
            if all(pos == (r, c) for c, pos in enumerate(line)):
                values = [table.text[r, c].strip() for c in range(width)]
                values = [v if len(v) <= 50 else v[:47] + "..." for v in values]
                comment = ", ".join(f"Column {c + 1}: {v}" for c, v in enumerate(values))
                return whole[:tag_end + 1] + f"<!-- Sample row ({r + 1}): {comment} -->" + whole[tag_end + 1:]
        return whole

    def __call__(self, sample):
        if "<table" in sample["text"].lower():
            sample["text"] = self._TABLE.sub(self._annotate, sample["text"])
        return sample


class BuildPrompt(Step):
    """The instruction; its version fixes what the model answers after its front matter (``answer``: markdown,
    or blocks), which the target and every reader of the model's answers follow."""

    presents = ("version",)

    def __init__(self, version: Annotated[str, OneOf(*PROMPT_VERSIONS)] = "v4"):
        build_prompt(version, anchor_text="")  # fail at construction on an unknown version
        self.version = version
        self.answer = answer_format(version)

    def __call__(self, sample):
        sample["prompt"] = build_prompt(self.version, sample.get("anchor_text"))
        sample["answer"] = self.answer
        return sample


TARGET_FORMATS = ("front_matter", "json")


@runtime("storage_wait_s")
class BuildTarget(Step):
    """What the model is taught to answer: front matter, then the page's markdown, or its blocks where the prompt
    asks for blocks (read from the page's blocks record beside its .md: :mod:`olmocr.formats.structure`; a remote
    read waits out storage as :class:`ParseFrontMatter`'s). ``json`` is olmOCR's older JSON form of a markdown
    answer."""

    def __init__(self, format: Annotated[str, OneOf(*TARGET_FORMATS)] = "front_matter", storage_wait_s: float = 0.0):
        if format not in TARGET_FORMATS:
            raise UserError(f"target format must be one of {', '.join(TARGET_FORMATS)}, got {format!r}")
        self.format = format
        self.storage_wait_s = storage_wait_s

    def __call__(self, sample):
        meta, text = sample["meta"], sample["text"]
        if sample.get("answer") == BLOCKS:
            if self.format != "front_matter":
                raise UserError(f"target format {self.format}: a prompt that asks for blocks has a front_matter "
                                "target (front matter, then the blocks)")
            sample["target"] = write_document(meta, format_blocks(self._blocks(sample)))
        elif self.format == "front_matter":
            sample["target"] = write_document(meta, text)
        else:
            sample["target"] = to_json_target(meta, text)
        return sample

    def _blocks(self, sample) -> list:
        md = sample.get("md_path") or ""
        path = (md[:-3] if md.endswith(".md") else md) + structure.SUFFIX
        try:
            record = json.loads(read_text(path, wait_s=self.storage_wait_s))
        except FileNotFoundError:
            raise Reject("missing_blocks", f"{md} has no blocks record ({os.path.basename(path)}) beside it: the "
                         "prompt asks for blocks") from None
        except (OSError, ValueError) as exc:
            raise Reject("unreadable_blocks", f"{path}: {exc}") from None
        try:
            return structure.blocks_from_record(record)
        except structure.StructureError as exc:
            raise Reject("blocks", f"{path}: {exc}") from None


class BuildMessages(Step):
    """The chat turn. Production puts the instruction before the image; inference must match."""

    presents = ("image_first",)

    def __init__(self, image_first: bool = False):
        self.image_first = image_first

    def __call__(self, sample):
        parts = [{"type": "text", "text": sample["prompt"]}, {"type": "image"}]
        if self.image_first:
            parts.reverse()
        sample["messages"] = [{"role": "user", "content": parts}]
        if "target" in sample:
            sample["messages"].append({"role": "assistant", "content": sample["target"]})
        return sample


@runtime("processor")
class Tokenize(Step):
    """Model inputs with labels: -100 over the prompt; the target ends with the end-of-turn token.

    ``processor`` is injected by the pipeline builder from the configured model.
    """

    def __init__(self, processor, max_length: int | None = None, end_of_turn: str = "<|im_end|>"):
        self.processor = processor
        self.max_length = max_length
        tokenizer = processor.tokenizer
        self.end_of_turn_id = tokenizer.convert_tokens_to_ids(end_of_turn)
        if self.end_of_turn_id is None or self.end_of_turn_id == tokenizer.unk_token_id:
            raise UserError(f"end_of_turn token {end_of_turn!r} is not in the tokenizer's vocabulary")
        header = processor.apply_chat_template(
            [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
        )
        assistant_header = header[header.rindex("<|im_start|>"):]
        self.header_ids = tokenizer(assistant_header, add_special_tokens=False)["input_ids"]
        self.special_tokens = tokenizer.all_special_tokens

    def _assistant_start(self, ids: list[int]) -> int:
        n = len(self.header_ids)
        for start in range(len(ids) - n, -1, -1):
            if ids[start:start + n] == self.header_ids:
                return start + n
        raise Reject("no_assistant_turn", "the chat template produced no assistant turn to learn")

    def __call__(self, sample):
        token = control_token_in(sample.get("target", ""), self.special_tokens)
        if token is not None:
            raise Reject("control_token", f"{sample.get('md_path')}: the target spells out the tokenizer's {token}")
        text = self.processor.apply_chat_template(sample["messages"], tokenize=False)
        enc = self.processor(text=[text], images=[sample["image"]], return_tensors="pt")
        input_ids = enc["input_ids"][0]
        ids = input_ids.tolist()
        if self.max_length is not None and len(ids) > self.max_length:
            raise Reject("too_long", f"{sample.get('md_path')}: {len(ids)} tokens > max_length {self.max_length}")
        labels = input_ids.clone()
        labels[: self._assistant_start(ids)] = IGNORE_INDEX
        end = len(ids) - 1 - ids[::-1].index(self.end_of_turn_id)
        labels[end + 1:] = IGNORE_INDEX
        # Keep every model input the processor returns (Qwen2-VL and Qwen3-VL also need mm_token_type_ids
        # for M-RoPE); per-token tensors lose their batch dimension so collators can pad them.
        for key, value in enc.items():
            per_token = value.dim() == 2 and value.shape == enc["input_ids"].shape
            sample[key] = value[0] if per_token else value
        sample["labels"] = labels
        return sample


@runtime("processor")
class RandomTokenFlip(Step):
    """Replace a fraction of the target's input tokens with random ones, labels unchanged, so the model
    learns to continue correctly after its own mistakes."""

    def __init__(self, processor, probability: Probability = 0.01):
        self.probability = probability
        tokenizer = processor.tokenizer
        special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
        # Special tokens are never drawn: an extra image-pad token would break the vision inputs.
        self.candidates = [i for i in range(len(tokenizer)) if i not in special]

    def __call__(self, sample):
        if self.probability == 0.0:
            return sample
        labels = sample["labels"]
        input_ids = sample["input_ids"].clone()
        # Flip only inside the target, never the end-of-turn token itself.
        positions = (labels != IGNORE_INDEX).nonzero().flatten()[:-1].tolist()
        rng = sample["rng"]
        for pos in positions:
            if rng.random() < self.probability:
                input_ids[pos] = rng.choice(self.candidates)
        sample["input_ids"] = input_ids
        return sample

