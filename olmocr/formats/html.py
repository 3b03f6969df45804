"""Self-contained HTML pages that open from disk: page images inlined, OCR markdown rendered (HTML tables
kept, equations as MathML from KaTeX, which browsers draw without fonts or scripts), anything else a
model wrote shown as text, never run."""

from __future__ import annotations

import base64
import html
import io
import re
from html.parser import HTMLParser

# Tags a model's page may use (tables, emphasis, lists, headings); any other tag is shown as text.
ALLOWED_TAGS = {"table", "thead", "tbody", "tfoot", "tr", "td", "th", "caption", "colgroup", "col", "br", "p", "b",
                "strong", "i", "em", "u", "sub", "sup", "span", "div", "ul", "ol", "li", "h1", "h2", "h3", "h4",
                "h5", "h6", "code", "pre", "blockquote", "hr", "s", "del", "mark"}
ALLOWED_ATTRS = {"rowspan", "colspan"}
# and on a list that does not start at 1 ("7. …" on a page), its first number: without it the page is drawn "1."
LIST_ATTRS = {"ol": {"start"}, "li": {"value"}}
_MATH = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
# Private-use characters mark highlighted spans through markdown rendering; no page text contains them.
MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"

STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1500px;padding:1em 2em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}table.data{border-collapse:collapse;margin:.5em 0}
table.data td,table.data th{border:1px solid #ccc;padding:2px 8px;text-align:left}
.pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1em;border-top:2px solid #888;
padding:1em 0}.pair img{max-width:100%;border:1px solid #ccc}.blocks img{border:0;outline:1px solid #ccc}
.blocks .block{position:absolute;border:2px solid;box-sizing:border-box}.blocks .block:hover{background:#ffe60040}
.markdown{overflow-x:auto;border:1px solid #ddd;padding:.5em 1em;background:#fafafa}
.markdown h1{font-size:1.6em;margin:.6em 0 .3em}.markdown h2{font-size:1.4em;margin:.6em 0 .3em}
.markdown h3{font-size:1.2em}.markdown h4{font-size:1.05em}.markdown h5{font-size:.95em}.markdown h6{font-size:.85em}
.markdown table{border-collapse:collapse}.markdown td,.markdown th{border:1px solid #bbb;padding:2px 6px}
.pass{color:#176117}.fail{color:#a11}.badge{font-weight:bold;font-family:monospace}
mark{background:#ffd54f}.muted{color:#777}.fallback{background:#fff3e0}
.notice{background:#ffebee;border-left:4px solid #c62828;padding:.4em .8em;font-weight:bold}
.bar{fill:#4c78a8}.whisker{stroke:#222;stroke-width:1.5}.delta-up{color:#176117}.delta-down{color:#a11}
"""


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def head(title: str) -> str:
    """An HTML page up to its body's content (pages written as they stream by go on from here)."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n")


TAIL = "\n</body></html>\n"


def document(title: str, body: str) -> str:
    return head(title) + body + TAIL


def jpeg(image, longest_side: int = 900, quality: int = 80) -> bytes:
    """A page image as JPEG bytes, scaled down to ``longest_side`` pixels."""
    image = image.convert("RGB")
    scale = longest_side / max(image.size)
    if scale < 1:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def image_data_url(image, longest_side: int = 900, quality: int = 80) -> str:
    """A page image as an inline JPEG (small enough for hundreds of pages in one file)."""
    return "data:image/jpeg;base64," + base64.b64encode(jpeg(image, longest_side, quality)).decode("ascii")


class _Sanitizer(HTMLParser):
    """Keeps allowed tags (with rowspan/colspan only); every other tag is written out as text."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.out: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":  # a figure reference (![description](page_x_y_w_h.png)): its description, nothing loaded
            alt = dict(attrs).get("alt") or ""
            self.out.append(f'<span class="muted">[figure: {esc(alt)}]</span>')
        elif tag in ALLOWED_TAGS:
            allowed = ALLOWED_ATTRS | LIST_ATTRS.get(tag, set())
            kept = "".join(f' {k}="{esc(v)}"' for k, v in attrs if k in allowed and v and v.isdigit())
            self.out.append(f"<{tag}{kept}>")
        else:
            self.out.append(esc(self.get_starttag_text()))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        self.out.append(f"</{tag}>" if tag in ALLOWED_TAGS else esc(f"</{tag}>"))

    def handle_data(self, data):
        self.out.append(esc(data))

    def handle_entityref(self, name):
        self.out.append(f"&{name};")

    def handle_charref(self, name):
        self.out.append(f"&#{name};")

    def handle_comment(self, data):
        self.out.append(f"<!--{esc(data)}-->")

    def unknown_decl(self, data):
        self.out.append(esc(f"<![{data}]>"))


def sanitize(fragment: str) -> str:
    parser = _Sanitizer()
    parser.feed(fragment)
    parser.close()
    return "".join(parser.out)


def _mathml(tex: str, display: bool) -> str:
    from olmocr.formats.latex import KatexError
    from olmocr.formats.latex import mathml as katex_mathml

    try:
        mathml = katex_mathml(tex)
    except KatexError:
        return f'<code class="fail" title="KaTeX cannot parse this">{esc(tex)}</code>'
    return mathml if display else mathml.replace('display="block"', 'display="inline"', 1)


def highlight(text: str, spans: list[str]) -> str:
    """``text`` with every occurrence of each span wrapped in highlight markers."""
    for span in sorted({s for s in spans if s and s.strip()}, key=len, reverse=True):
        text = text.replace(span, MARK_OPEN + span + MARK_CLOSE)
    return text


def markdown_html(text: str, marks: list[str] = ()) -> str:
    """A page's markdown as safe HTML: markdown-it (tables in HTML kept), equations as MathML, the
    ``marks`` spans highlighted."""
    from markdown_it import MarkdownIt

    text = highlight(text, list(marks))
    equations: list[str] = []

    def stash(match: re.Match) -> str:
        display = match.group(2) is not None
        tex = (match.group(2) if display else match.group(1)).replace(MARK_OPEN, "").replace(MARK_CLOSE, "")
        equations.append(_mathml(tex, display))
        return f"\ue002{len(equations) - 1}\ue003"

    text = _MATH.sub(stash, text)
    rendered = sanitize(MarkdownIt("commonmark", {"html": True}).enable("table").render(text))
    rendered = re.sub("\ue002(\\d+)\ue003", lambda m: equations[int(m.group(1))], rendered)
    return rendered.replace(MARK_OPEN, "<mark>").replace(MARK_CLOSE, "</mark>")


def bars_svg(rows: list[tuple], width: int = 480) -> str:
    """Horizontal bars of rates in [0, 1] with optional intervals: rows of (label, value, low, high) or (label,
    value, low, high, note), the note (what the rate is of: "9/20 tests") written after the rate."""
    height, label_w, bar_w = 22, 170, width - 290
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height * len(rows) + 6}" '
             f'role="img" class="bars">']
    for i, (label, value, low, high, *note) in enumerate(rows):
        y = 3 + i * height
        said = f"{100 * value:.1f}%" + (f" ({note[0]})" if note else "")
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{esc(label[:28])}</text>'
                     f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{bar_w * value:.1f}" height="{height - 8}">'
                     f"<title>{esc(label)}: {esc(said)}</title></rect>")
        if low is not None and high is not None:
            x1, x2, mid = label_w + bar_w * low, label_w + bar_w * high, y + height / 2
            parts.append(f'<line class="whisker" x1="{x1:.1f}" x2="{x2:.1f}" y1="{mid:.1f}" y2="{mid:.1f}"/>')
        parts.append(f'<text x="{label_w + bar_w + 6}" y="{y + 15}" font-size="12" class="rate">{esc(said)}</text>')
    return "".join(parts) + "</svg>"
