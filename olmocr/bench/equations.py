"""Equation equivalence for math tests: two equations match when KaTeX renders them to the same MathML.

Equations are rendered by KaTeX (under Node, one long-lived process per Python process) to MathML, which
already forgets how the TeX was written (``\\frac a b`` vs ``\\frac{a}{b}``, ``x^2`` vs ``x^{2}``,
``\\left(`` vs ``(``). :func:`canonical` then drops what changes spacing or size but not the symbols and
their arrangement (spaces, style and padding wrappers, stretchiness, invisible operators), so a
reference passes when some equation in the OCR output contains the same sequence of rendered symbols.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import NamedTuple

from rapidfuzz.distance import Levenshtein

from olmocr.errors import UserError
from olmocr.formats.latex import KatexError, mathml


class Node(NamedTuple):
    tag: str
    attrs: tuple[tuple[str, str], ...]
    text: str
    children: tuple[Node, ...]


# -- finding equations in markdown ------------------------------------------------------------------------------
_ENVIRONMENTS = r"equation|align|alignat|gather|multline|eqnarray|flalign|displaymath"
_ENV = rf"(?P<env>\\begin\{{(?P<name>{_ENVIRONMENTS})\*?\}}.+?\\end\{{(?P=name)\*?\}})"
# (display, inline) patterns, with and without dollar delimiters
_PATTERNS = {
    True: (re.compile(rf"\$\$(?P<a>.+?)\$\$|\\\[(?P<b>.+?)\\\]|{_ENV}", re.DOTALL),
           re.compile(r"\\\((?P<a>.+?)\\\)|(?<![\\$])\$(?!\$)(?P<b>[^\n]+?)(?<![\\$])\$", re.DOTALL)),
    False: (re.compile(rf"\\\[(?P<b>.+?)\\\]|{_ENV}", re.DOTALL),
            re.compile(r"\\\((?P<a>.+?)\\\)", re.DOTALL)),
}


def extract_equations(markdown: str, dollars: bool = True) -> list[str]:
    """Every equation in an OCR output: ``$$…$$``, ``\\[…\\]``, bare equation environments, ``\\(…\\)``
    and ``$…$`` (not ``\\$``), in that priority, each span counted once; ``dollars=False`` leaves out
    the two dollar-delimited forms (a test's ``ignore_dollar_delimited``)."""
    found: list[str] = []

    def take(match: re.Match) -> str:
        groups = match.groupdict()
        found.append(groups.get("a") or groups.get("b") or groups.get("env"))
        return " "

    display, inline = _PATTERNS[dollars]
    inline.sub(take, display.sub(take, markdown))
    return [eq.strip() for eq in found if eq.strip()]


# -- rendering ---------------------------------------------------------------------------------------------------
_cache: dict[str, Node | KatexError] = {}


def render(tex: str) -> Node:
    """The canonical MathML tree of an equation (cached); raises KatexError when KaTeX rejects it."""
    if tex not in _cache:
        if len(_cache) > 100_000:
            _cache.clear()
        try:
            _cache[tex] = canonical(mathml(tex))
        except KatexError as exc:
            _cache[tex] = exc
    result = _cache[tex]
    if isinstance(result, KatexError):
        raise result
    return result


# -- canonical form ---------------------------------------------------------------------------------------------
# Wrappers that change size, style or spacing but not which symbols appear where.
_TRANSPARENT = {"math", "semantics", "mrow", "mstyle", "mpadded"}
_DROPPED = {"annotation", "annotation-xml", "mspace", "mphantom", "none"}
# Children of these are positional (numerator/denominator, base/script, …): each stays one node.
_POSITIONAL = {"mfrac", "msup", "msub", "msubsup", "munder", "mover", "munderover", "mroot", "mmultiscripts"}
# Attributes that change what is drawn; all others (stretchy, fence, lspace, minsize, …) only change spacing.
_KEPT_ATTRS = {"mathvariant", "linethickness", "notation"}
# Function application, invisible times/separator/plus: they render as nothing.
_INVISIBLE = {"\u2061", "\u2062", "\u2063", "\u2064", "\u200b"}


def _attrs(el: ET.Element) -> tuple[tuple[str, str], ...]:
    out = []
    for key, value in sorted(el.attrib.items()):
        if key not in _KEPT_ATTRS:
            continue
        if key == "linethickness":
            value = "0" if re.fullmatch(r"0+(\.0*)?[a-z]*", value) else value
        if key == "mathvariant" and value in ("normal", "italic"):
            continue  # upright or slanted, the same letters (\text{x} vs x, \operatorname{sin} vs \sin)
        out.append((key, value))
    return tuple(out)


# Token text splits into atoms: whole numbers, single letters, single other symbols; spaces go.
_ATOM = re.compile(r"(?P<mn>\d+(?:\.\d+)*)|(?P<mi>[^\W\d_])|(?P<space>\s)|(?P<mo>.)", re.S)


def _atoms(el: ET.Element) -> list[Node]:
    """A token element (identifier, number, operator, text) as atoms, so that how the TeX grouped its
    characters does not matter: ``\text{ mod 4}`` and ``\text{ mod } 4``, ``\\operatorname{Ann}`` and
    ``\text{Ann}`` give the same atoms; a number stays whole, so ``5`` is not found in ``57``."""
    text = "".join(ch for ch in "".join(el.itertext()) if ch not in _INVISIBLE)
    attrs = _attrs(el)
    return [Node(m.lastgroup, attrs, m.group(), ()) for m in _ATOM.finditer(text) if m.lastgroup != "space"]


# Big operators whose limits KaTeX sets beside (\int) or above and below (\sum, \lim, \limits): the
# same limits either way.
_BIG_OPERATORS = set("∫∬∭∮∯∰∑∏∐⋀⋁⋂⋃⨀⨁⨂⨄⨆") | {"lim", "liminf", "limsup", "max", "min", "sup", "inf", "det",
                                                 "gcd", "Pr"}
_LIMITS_AS_SCRIPTS = {"munderover": "msubsup", "munder": "msub", "mover": "msup"}


_OPEN, _CLOSE = "([{|\u2016\u27e8\u230a\u2308", ")]}|\u2016\u27e9\u230b\u2309"


def _script_on_fence(node: Node) -> list[Node]:
    """``\\left(x+1\\right)^2`` scripts the group, ``(x+1)^2`` only the ``)``; both draw the script after
    the closing fence, so the scripted group becomes the row with the script on its closing fence."""
    if node.tag in ("msup", "msub", "msubsup") and node.children[0].tag == "mrow":
        inner = node.children[0].children
        if len(inner) >= 2 and inner[0].tag == inner[-1].tag == "mo" and inner[0].text in _OPEN \
                and inner[-1].text in _CLOSE:
            return [*inner[:-1], node._replace(children=(inner[-1], *node.children[1:]))]
    return [node]


def _row(nodes: list[Node]) -> tuple[Node, ...]:
    merged: list[Node] = []
    for node in (piece for n in nodes for piece in _script_on_fence(n)):
        # digits split by braces (1{2}) render as one number
        if merged and node.tag == "mn" == merged[-1].tag and node.attrs == merged[-1].attrs:
            merged[-1] = merged[-1]._replace(text=merged[-1].text + node.text)
        else:
            merged.append(node)
    return tuple(merged)


def _one(nodes: list[Node]) -> Node:
    return nodes[0] if len(nodes) == 1 else Node("mrow", (), "", _row(nodes))


def _positional(el: ET.Element, tag: str) -> Node:
    parts = [_one(_normalize(child)) for child in el]
    if tag in ("mover", "munder") and len(parts) == 2 and "true" in (el.get("accent"), el.get("accentunder")):
        accent = el[1]
        if accent.tag.rsplit("}", 1)[-1] == "mo" and accent.get("stretchy") == "true":
            # \widehat and \hat draw different accents: keep what the stretchy one is
            parts[1] = parts[1]._replace(attrs=(*parts[1].attrs, ("stretchy", "true")))
    if tag in _LIMITS_AS_SCRIPTS and parts and "".join(a.text for a in _leaves(parts[0])) in _BIG_OPERATORS:
        tag = _LIMITS_AS_SCRIPTS[tag]
    return Node(tag, _attrs(el), "", tuple(parts))


def _leaves(node: Node):
    if not node.children:
        yield node
    for child in node.children:
        yield from _leaves(child)


def _table(el: ET.Element) -> Node:
    """A table; in an alignment (columns set left or right: aligned, cases, split, …) the cells of a
    row are one run of symbols, since where the & goes is layout; matrix cells stay apart."""
    alignment = bool({"left", "right"} & set(el.get("columnalign", "").split()))
    rows = []
    for row in el:
        cells = [[node for part in cell for node in _normalize(part)] for cell in row]  # each <mtd>'s content
        if alignment:
            rows.append(Node("mtr", (), "", _row([node for cell in cells for node in cell])))
        else:
            rows.append(Node("mtr", (), "", tuple(Node("mtd", (), "", _row(nodes)) for nodes in cells)))
    return Node("mtable", (), "", tuple(rows))


def _normalize(el: ET.Element) -> list[Node]:
    tag = el.tag.rsplit("}", 1)[-1]
    if tag in _DROPPED:
        return []
    if tag in ("mi", "mn", "mo", "mtext", "ms"):
        return _atoms(el)
    if tag in _POSITIONAL:
        return [_positional(el, tag)]
    if tag == "mtable":
        return [_table(el)]
    children = [node for child in el for node in _normalize(child)]
    if tag in _TRANSPARENT:
        return children
    return [Node(tag, _attrs(el), "", _row(children))]


def canonical(mathml: str) -> Node:
    """Parse KaTeX's MathML and reduce it to the symbols and their arrangement (see module docstring)."""
    start = mathml.find("<math")
    end = mathml.rfind("</math>")
    if start < 0 or end < 0:
        raise UserError(f"not MathML: {mathml[:80]!r}")
    root = ET.fromstring(mathml[start:end + len("</math>")])
    return Node("math", (), "", _row(_normalize(root)))


def to_text(node: Node) -> str:
    """A compact readable form of a canonical tree, for explanations and closeness."""
    marks = "".join(f"[{key}={value}]" for key, value in node.attrs)
    if not node.children:
        return node.text + marks
    inner = " ".join(to_text(c) for c in node.children)
    return inner if node.tag in ("math", "mrow") else f"{node.tag}{marks}({inner})"


def _rows(node: Node):
    """Every sequence of siblings in which a run of reference symbols may appear; a table row counts
    as the symbols of its cells in order, so one line of an alignment can be found."""
    if node.tag == "mtr":
        yield tuple(s for cell in node.children for s in (cell.children if cell.tag == "mtd" else (cell,)))
    elif node.children and node.tag not in _POSITIONAL:
        yield node.children
    for child in node.children:
        yield from _rows(child)


def _found(needle: tuple[Node, ...], candidate: Node) -> bool:
    n = len(needle)
    return n > 0 and any(row[i:i + n] == needle for row in _rows(candidate) for i in range(len(row) - n + 1))


def contains(candidate: Node, reference: Node) -> bool:
    """The reference's symbols appear as one contiguous run of siblings somewhere in the candidate; a
    reference that is an alignment needs each of its lines found."""
    if len(reference.children) == 1 and reference.children[0].tag == "mtable":
        lines = [next(_rows(line)) for line in reference.children[0].children]
        return bool(lines) and all(_found(line, candidate) for line in lines)
    return _found(reference.children, candidate)


def _squash(tex: str) -> str:
    return re.sub(r"\s+", "", tex)


def match(reference: str, markdown: str, dollars: bool = True) -> tuple[bool, str]:
    """Whether some equation in ``markdown`` renders like ``reference`` (or contains it)."""
    equations = extract_equations(markdown, dollars)
    if not equations:
        return False, "no equation found in the output ($$…$$, \\[…\\], \\(…\\), $…$ or an environment)"
    if any(_squash(eq) == _squash(reference) for eq in equations):
        return True, "same TeX"
    try:
        wanted = render(reference)
    except KatexError as exc:
        try:  # lines of an alignment (with & or \\\\) are written without their environment
            wanted = render(f"\\begin{{aligned}}{reference}\\end{{aligned}}")
        except KatexError:
            return False, f"the reference equation does not parse in KaTeX: {exc}"
    rendered, broken = [], 0
    for eq in equations:
        try:
            rendered.append((eq, render(eq)))
        except KatexError:
            broken += 1
    for eq, tree in rendered:
        if contains(tree, wanted):
            return True, f"renders the same as {eq!r}"
    note = f"; {broken} equation(s) did not parse" if broken else ""
    if not rendered:
        return False, f"none of the {len(equations)} equation(s) parse in KaTeX"
    want_text = to_text(wanted)
    eq, tree = min(rendered, key=lambda r: Levenshtein.normalized_distance(to_text(r[1]), want_text))
    return False, (f"no equation renders like the reference ({want_text!r}); closest of {len(rendered)}: "
                   f"{eq!r} ({to_text(tree)!r}){note}")
