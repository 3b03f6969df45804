"""Instructions given to the model with a page image.

``v4`` is the production prompt (no anchor text): inference must use the same wording, and the data
steps, the pipeline and GRPO import it from here (the lowest layer, so the locally built models' tokenizers
can learn from it too). ``v1`` is the older anchored prompt, which also gives
the page's own text layer between RAW_TEXT_START and RAW_TEXT_END. ``brief`` is v4's instruction in one
sentence, for a model trained from scratch on CPU (the reader): v4's 131 tokens are nearly half of a one-line
page's ~285 there, and a model that learns its instruction from nothing learns as much from a short one.

``blocks`` and ``brief_blocks`` ask for the page as structure (:mod:`olmocr.formats.structure`): labelled blocks
with boxes, furniture kept as blocks of its own. A prompt version fixes the answer's format
(:func:`answer_format`), and a model's record of how it was trained names its prompt version
(:mod:`olmocr.data.presented`): every stage that prompts a model parses its answers by that, with no flag.
"""

from __future__ import annotations

from olmocr.errors import UserError
from olmocr.formats.structure import LABELS

PROMPT_V4 = (
    "Below is the image of one page of a document. Transcribe it as markdown in natural reading "
    "order, the way a person would read the page aloud. Write equations in LaTeX, using \\( \\) "
    "inline and \\[ \\] for display math, and tables as HTML. For each figure or chart, write "
    "![a description of the figure](page_x_y_w_h.png) with its position and size on the page. "
    "Leave out running headers, footers and page numbers. Start your answer with a YAML front "
    "matter that gives primary_language, is_rotation_valid, rotation_correction, is_table and "
    "is_diagram for this page."
)

PROMPT_V1_TEMPLATE = (
    "Below is the image of one page of a document, followed by the text layer extracted from the "
    "PDF with the position of each fragment. Return the plain text of the page as a person would "
    "read it, in natural reading order. Use the image as the authority: the raw text may be "
    "incomplete, out of order or wrong. Do not invent text that is not on the page.\n"
    "RAW_TEXT_START\n{anchor_text}\nRAW_TEXT_END"
)

PROMPT_BRIEF = "Transcribe the page as markdown in natural reading order, after a YAML front matter."

PROMPT_BLOCKS = (
    "Below is the image of one page of a document. Write the page as its blocks in natural reading order. "
    "Open each block with <div data-label=\"LABEL\" data-bbox=\"x0 y0 x1 y1\">, where LABEL is one of "
    f"{', '.join(LABELS)}, and x0 y0 x1 y1 are the block's left, top, right and bottom edges in whole numbers "
    "from 0 to 1000 of the page image; write its content as markdown, equations in LaTeX and tables as HTML; "
    "close it with </div>. Running headers, footers and page numbers are blocks with their own labels. Start "
    "your answer with a YAML front matter that gives primary_language, is_rotation_valid, rotation_correction, "
    "is_table and is_diagram for this page."
)

PROMPT_BRIEF_BLOCKS = "Write the page as labelled blocks with boxes in natural reading order, after a YAML front matter."

PROMPT_VERSIONS = ("v1", "v4", "brief", "blocks", "brief_blocks")
MARKDOWN, BLOCKS = "markdown", "blocks"  # what an answer is after its front matter
_ANSWERS = {"v1": MARKDOWN, "v4": MARKDOWN, "brief": MARKDOWN, "blocks": BLOCKS, "brief_blocks": BLOCKS}


def answer_format(version: str) -> str:
    """What a model prompted with ``version`` writes after its front matter: markdown, or blocks."""
    if version not in _ANSWERS:
        raise UserError(f"prompt version must be one of {', '.join(PROMPT_VERSIONS)}, got {version!r}")
    return _ANSWERS[version]


def build_prompt(version: str, anchor_text: str | None = None) -> str:
    if version == "v4":
        return PROMPT_V4
    if version == "brief":
        return PROMPT_BRIEF
    if version == "blocks":
        return PROMPT_BLOCKS
    if version == "brief_blocks":
        return PROMPT_BRIEF_BLOCKS
    if version == "v1":
        if anchor_text is None:
            raise UserError("prompt version v1 needs anchor text: add an anchor_text step before the prompt step")
        return PROMPT_V1_TEMPLATE.format(anchor_text=anchor_text)
    raise UserError(f"prompt version must be one of {', '.join(PROMPT_VERSIONS)}, got {version!r}")
