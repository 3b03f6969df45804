"""Instructions given to the model with a page image.

``v4`` is the production prompt (no anchor text): inference must use the same wording, and the data
steps, the pipeline and GRPO import it from here (the lowest layer, so the locally built models' tokenizers
can learn from it too). ``v1`` is the older anchored prompt, which also gives
the page's own text layer between RAW_TEXT_START and RAW_TEXT_END. ``brief`` is v4's instruction in one
sentence, for a model trained from scratch on CPU (the reader): v4's 131 tokens are nearly half of a one-line
page's ~285 there, and a model that learns its instruction from nothing learns as much from a short one.
"""

from __future__ import annotations

from olmocr.errors import UserError

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

PROMPT_VERSIONS = ("v1", "v4", "brief")


def build_prompt(version: str, anchor_text: str | None = None) -> str:
    if version == "v4":
        return PROMPT_V4
    if version == "brief":
        return PROMPT_BRIEF
    if version == "v1":
        if anchor_text is None:
            raise UserError("prompt version v1 needs anchor text: add an anchor_text step before the prompt step")
        return PROMPT_V1_TEMPLATE.format(anchor_text=anchor_text)
    raise UserError(f"prompt version must be one of {', '.join(PROMPT_VERSIONS)}, got {version!r}")
