"""Text rules for targets: LaTeX normalisation and the checks behind the rule filters."""

from __future__ import annotations

import re
from html.parser import HTMLParser

# Display math first so "$$" is never read as two inline delimiters.
_DISPLAY_DOLLARS = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$", re.S)
# Inline "$x$": no space just inside the delimiters, no newline, so "$5 and $10" stays prose.
_INLINE_DOLLARS = re.compile(r"(?<![\\$])\$(?=\S)([^$\n]+?)(?<=\S)(?<!\\)\$(?!\d)")
_MATH_SPAN = re.compile(r"\\\[.*?\\\]|\\\(.*?\\\)", re.S)
_LATEX_COMMAND = re.compile(r"\\(?:frac|sqrt|sum|int|prod|lim|alpha|beta|gamma|delta|theta|lambda|mu|sigma|"
                            r"pi|infty|cdot|times|leq|geq|neq|approx|mathbf|mathrm|mathcal|left|right|"
                            r"begin|end|partial|nabla|hat|bar|vec|tilde|overline|textbf|textit|emph)\b")
_SCRIPT = re.compile(r"[\^_]\{")
_PIPE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_PIPE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_STYLE_COMMANDS = {"textbf": "**", "textit": "*", "emph": "*"}


def split_math(text: str) -> list[tuple[bool, str]]:
    """Split text into (is_math, piece) runs on \\[ \\] and \\( \\) delimiters."""
    out, pos = [], 0
    for match in _MATH_SPAN.finditer(text):
        if match.start() > pos:
            out.append((False, text[pos:match.start()]))
        out.append((True, match.group(0)))
        pos = match.end()
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def _replace_style_commands(text: str) -> str:
    out, i = [], 0
    pattern = re.compile(r"\\(textbf|textit|emph)\{")
    while True:
        match = pattern.search(text, i)
        if match is None:
            out.append(text[i:])
            return "".join(out)
        depth, j = 1, match.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:  # unbalanced: leave the rest untouched
            out.append(text[i:])
            return "".join(out)
        marker = _STYLE_COMMANDS[match.group(1)]
        inner = _replace_style_commands(text[match.end():j - 1])
        out.append(text[i:match.start()] + marker + inner + marker)
        i = j


def normalize_latex(text: str) -> str:
    text = _DISPLAY_DOLLARS.sub(lambda m: "\\[" + m.group(1) + "\\]", text)
    text = _INLINE_DOLLARS.sub(lambda m: "\\(" + m.group(1) + "\\)", text)
    return "".join(piece if is_math else _replace_style_commands(piece) for is_math, piece in split_math(text))


def has_markdown_table(text: str) -> bool:
    lines = text.split("\n")
    return any(_PIPE_ROW.match(a) and _PIPE_RULE.match(b) for a, b in zip(lines, lines[1:]))


def has_latex_outside_math(text: str) -> bool:
    prose = "".join(piece for is_math, piece in split_math(text) if not is_math)
    return bool(_LATEX_COMMAND.search(prose) or _SCRIPT.search(prose))


class _TableChecker(HTMLParser):
    """Checks that table tags nest and close: table > (thead|tbody|tfoot)? > tr > (td|th)."""

    PARENTS = {"tr": {"table", "thead", "tbody", "tfoot"}, "td": {"tr"}, "th": {"tr"},
               "thead": {"table"}, "tbody": {"table"}, "tfoot": {"table"}, "caption": {"table"}}
    TABLE_TAGS = {"table", "tr", "td", "th", "thead", "tbody", "tfoot", "caption"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag, attrs):
        if self.error or tag not in self.TABLE_TAGS:
            return
        parent = self.stack[-1] if self.stack else None
        if tag in self.PARENTS and parent not in self.PARENTS[tag]:
            self.error = f"<{tag}> inside <{parent or 'nothing'}>"
        elif tag == "table" and parent not in (None, "td", "th"):
            self.error = f"<table> inside <{parent}>"
        for name, value in attrs:
            if name in ("rowspan", "colspan") and not (value or "").strip().isdigit():
                self.error = f"{name}={value!r} is not a number"
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if self.error or tag not in self.TABLE_TAGS:
            return
        if not self.stack or self.stack[-1] != tag:
            self.error = f"</{tag}> does not close <{self.stack[-1] if self.stack else 'nothing'}>"
        else:
            self.stack.pop()


def html_table_error(text: str) -> str | None:
    """Why the HTML tables in ``text`` are malformed, or None when they are well formed (or absent)."""
    if "<table" not in text and "</table" not in text:
        return None
    checker = _TableChecker()
    checker.feed(text)
    checker.close()
    if checker.error:
        return checker.error
    if checker.stack:
        return f"<{checker.stack[-1]}> is never closed"
    return None
