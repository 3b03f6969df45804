"""Rewards computed from the completion text alone or against a reference page (SPEC §4)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from rapidfuzz.distance import Levenshtein

from olmocr.config import runtime
from olmocr.data.text_rules import split_math
from olmocr.formats.frontmatter import FIELDS, FrontMatterError, page_text, parse_document
from olmocr.formats.tables import MalformedTable, parse_tables

_HTML_TABLE = re.compile(r"<table\b", re.I)


def completion_text(completion) -> str:
    """trl passes plain strings, or for chat prompts a list of messages ending with the assistant's."""
    if isinstance(completion, str):
        return completion
    content = completion[-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def _per_completion(column, n: int) -> list:
    return list(column) if column is not None else [None] * n


def medoid(completions: Sequence, prompts: Sequence | None = None, page_id: Sequence | None = None,
           **_) -> list[float]:
    """Within each group of completions for the same page, the Levenshtein medoid scores 1 and every
    other completion 1 - d(i, medoid) / (largest pairwise distance in the group).

    Groups are keyed by the ``page_id`` column when the dataset has one: page prompts share their text
    and differ only in the image, which ``prompts`` does not carry."""
    texts = [completion_text(c) for c in completions]
    column = page_id if page_id is not None else prompts
    keys = [json.dumps(p, sort_keys=True, default=str) for p in column] if column is not None else [""] * len(texts)
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    rewards = [0.0] * len(texts)
    for members in groups.values():
        n = len(members)
        dist = [[0] * n for _ in range(n)]
        for a in range(n):
            for b in range(a + 1, n):
                dist[a][b] = dist[b][a] = Levenshtein.distance(texts[members[a]], texts[members[b]])
        center = min(range(n), key=lambda a: (sum(dist[a]), a))
        largest = max(max(row) for row in dist)
        for k, i in enumerate(members):
            rewards[i] = 1.0 if largest == 0 else 1.0 - dist[k][center] / largest
    return rewards


def edit_distance(completions: Sequence, reference: Sequence | None = None, **_) -> list[float]:
    """Levenshtein similarity (1 - distance / longer length) to the reference markdown; 0 without one."""
    refs = _per_completion(reference, len(completions))
    return [Levenshtein.normalized_similarity(completion_text(c), r) if r is not None else 0.0
            for c, r in zip(completions, refs)]


def front_matter(completions: Sequence, reference: Sequence | None = None, **_) -> list[float]:
    """0 when the front matter does not parse; else (5 + one per field equal to the reference's) / 10."""
    refs = _per_completion(reference, len(completions))
    out = []
    for completion, ref in zip(completions, refs):
        try:
            meta, _ = parse_document(completion_text(completion))
        except FrontMatterError:
            out.append(0.0)
            continue
        matches = 0
        if ref is not None:
            try:
                ref_meta, _ = parse_document(ref)
                matches = sum(getattr(meta, f) == getattr(ref_meta, f) for f in FIELDS)
            except FrontMatterError:
                matches = 0
        out.append((5 + matches) / 10)
    return out


def _counts(text: str) -> tuple[int, int]:
    body = page_text(text)
    return len(_HTML_TABLE.findall(body)), sum(is_math for is_math, _ in split_math(body))


def element_count(completions: Sequence, reference: Sequence | None = None, **_) -> list[float | None]:
    """0.5 when the number of HTML tables matches the reference, 0.5 when the number of math spans does;
    None without a reference."""
    refs = _per_completion(reference, len(completions))
    out: list[float | None] = []
    for completion, ref in zip(completions, refs):
        if ref is None:
            out.append(None)
            continue
        tables, maths = _counts(completion_text(completion))
        ref_tables, ref_maths = _counts(ref)
        out.append(0.5 * (tables == ref_tables) + 0.5 * (maths == ref_maths))
    return out


def rectangular_tables(completions: Sequence, **_) -> list[float]:
    """Fraction of HTML tables that cover every position of their grid once spans are laid out (1 if
    none; 0 when the spans cannot be laid out at all)."""
    out = []
    for completion in completions:
        try:
            tables = parse_tables(completion_text(completion), include_markdown=False)
        except MalformedTable:
            out.append(0.0)
            continue
        out.append(sum(t.rectangular for t in tables) / len(tables) if tables else 1.0)
    return out


@runtime("eos_token_ids")
def eos(completions: Sequence, completion_ids: Sequence | None = None, finish_reason: Sequence | None = None, *,
        eos_token_ids: Sequence[int] = (), **_) -> list[float]:
    """1 when the completion's last token is an end-of-sequence token (it stopped by itself), else 0
    (it was cut at the length limit). ``eos_token_ids`` are those generation stops on. Completions from a
    chat server come with its ``finish_reason`` instead: "stop" is stopping by itself."""
    if finish_reason is not None:
        return [1.0 if reason == "stop" else 0.0 for reason in finish_reason]
    if completion_ids is None:
        raise ValueError("the eos reward needs the completion token ids (trl passes completion_ids)")
    if not eos_token_ids:
        raise ValueError("the eos reward needs eos_token_ids (the GRPO stage passes the tokenizer's)")
    stops = set(eos_token_ids)
    return [1.0 if ids and ids[-1] in stops else 0.0 for ids in completion_ids]
