"""A bench for comparing scores with olmOCR-bench's scorer: synthetic pages, their tests (math left out:
olmOCR-bench renders equations in a browser), extra test lines using every field that olmOCR-bench
writes, and OCR-like outputs made from the truth with the damage real outputs have, in two candidate
folders: ``one`` (one repeat per page) and ``three`` (three repeats, one of them often bad).

``python tests/parity_fixture.py DIR`` writes it; tests/expected/bench_parity.json holds what
olmOCR-bench's scorer (allenai/olmocr, olmocr/bench/benchmark.py) reported on it, and how to redo that.
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
import sys

PAGES = 24
SEED = 7


def _damage(text: str, rng: random.Random, rate: float) -> str:
    out = []
    for ch in text:
        roll = rng.random()
        if roll < rate / 3:
            continue
        out.append(rng.choice("aeiou nrst") if roll < 2 * rate / 3 else ch)
        if 2 * rate / 3 <= roll < rate:
            out.append(rng.choice("aeiou "))
    return "".join(out)


def _markdown_tables(text: str) -> str:
    """HTML tables of the truth written as markdown pipe tables (spans dropped), as many models do."""
    def table(match):
        rows = re.findall(r"<tr>(.*?)</tr>", match.group(0), re.S)
        cells = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S) for row in rows]
        lines = ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(lines[:1] + ["|" + "---|" * len(cells[0])] + lines[1:]) if cells and cells[0] else ""
    return re.sub(r"<table>.*?</table>", table, text, flags=re.S)


def _output(truth: str, rng: random.Random, kind: str) -> str:
    """One OCR-like output of a page."""
    paragraphs = truth.split("\n\n")
    if kind == "noisy":
        return _damage(truth, rng, rng.choice([0.0, 0.005, 0.02]))
    if kind == "styled":  # emphasis, a footnote marker, markdown tables, a figure link with brackets
        paragraphs = [f"**{p}**" if rng.random() < 0.2 and not p.startswith(("#", "<", "\\")) else p for p in paragraphs]
        marker = rng.choice(["[^1]", "<sup>1</sup>", "¹"])
        paragraphs[min(1, len(paragraphs) - 1)] += marker
        paragraphs.append(f"{marker[:-1] if marker.endswith(']') else marker} A note at the foot of the page.")
        paragraphs.insert(rng.randrange(len(paragraphs) + 1), "![Figure [1]: a chart of 12 bars](page_1_2_3_4.png)")
        return _markdown_tables("\n\n".join(paragraphs))
    if kind == "shuffled":
        rng.shuffle(paragraphs)
        return "\n\n".join(paragraphs)
    if kind == "truncated":
        return "\n\n".join(paragraphs[: max(1, len(paragraphs) // 2)])
    if kind == "looping":
        return truth + " the end" * 40
    if kind == "foreign":
        return truth.replace(" ", " 中文 ", 3)
    return ""  # empty


def _feature_tests(name: str, truth: str, rng: random.Random) -> list[dict]:
    """Test lines for one page using the fields synthetic tests do not: windows, case, fuzzy absent,
    format, footnote, table options, blank-page alt text, checked."""
    pdf = f"{name}.pdf"
    words = re.sub(r"[#*<>\\\[\]{}|$^_]", " ", truth).split()
    if len(words) < 8:
        return []
    tid = iter(f"{name}_feature_{i:02d}" for i in range(100))
    head, tail = " ".join(words[:3]), " ".join(words[-3:])
    out = [
        {"type": "present", "text": head.upper(), "case_sensitive": False, "first_n": 200},
        {"type": "present", "text": tail, "last_n": 120, "max_diffs": 1},
        {"type": "present", "text": head, "first_n": 60, "last_n": 60},
        {"type": "absent", "text": " ".join(words[3:6]), "max_diffs": 2, "checked": "rejected"},
        {"type": "absent", "text": "A note at the foot of the page", "max_diffs": 3},
        {"type": "footnote", "marker": "1", "appears_after_marker": "A note at the foot", "max_diffs": 1},
    ]
    if rng.random() < 0.5:  # the other pages keep (or get from the scorer) a plain baseline test
        out.append(rng.choice([{"type": "baseline", "max_repeats": 10, "check_disallowed_characters": False},
                               {"type": "baseline", "max_length": len(truth) // 2,
                                "max_length_skips_image_alt_tags": rng.random() < 0.5}]))
    title = re.match(r"#+ (.+)", truth)
    if title:
        out.append({"type": "format", "text": title.group(1), "format": "heading", "max_diffs": rng.choice([0, 2])})
        out.append({"type": "format", "text": title.group(1)[:8], "format": "bold", "case_sensitive": False})
    cells = re.findall(r"<td>([^<]+)</td><td>([^<]+)</td>", truth)
    if cells:
        left, right = rng.choice(cells)
        out.append({"type": "table", "cell": right, "left": left, "ignore_markdown_tables": True})
        out.append({"type": "table", "cell": right, "left": left, "max_diffs": 1})
    return [{"pdf": pdf, "page": 1, "id": next(tid), **test} for test in out]


def build(out: str) -> None:
    from omegaconf import OmegaConf

    from olmocr.config import compose
    from olmocr.formats.frontmatter import parse_document
    from olmocr.synth.generator import generate

    cfg = compose("synth")
    generate(out, PAGES, seed=SEED, language_weights=OmegaConf.to_container(cfg.language_weights),
             layout_weights={"single_column": 2, "two_column": 2, "table": 3, "diagram": 1, "math": 1, "blank": 1})
    with open(os.path.join(out, "synth.jsonl"), encoding="utf-8") as fh:
        # every third page loses its baseline test, so that the scorer adds one
        lines = [line for line in fh if '"type": "math"' not in line and
                 not ('"type": "baseline"' in line and int(json.loads(line)["pdf"][-7:-4]) % 3 == 0)]
    with open(os.path.join(out, "synth.jsonl"), "w", encoding="utf-8") as fh:
        fh.writelines(lines)
    rng = random.Random(SEED)
    features = []
    for md in sorted(glob.glob(os.path.join(out, "pdfs", "*.md"))):
        name = os.path.basename(md)[:-3]
        with open(md, encoding="utf-8") as fh:
            truth = parse_document(fh.read())[1]
        os.remove(md)  # the bench holds PDFs only
        features += _feature_tests(name, truth, rng)
        kinds = ["noisy", "styled", rng.choice(["shuffled", "truncated", "looping", "foreign", "empty", "noisy"])]
        for folder, count in (("one", 1), ("three", 3)):
            os.makedirs(os.path.join(out, folder), exist_ok=True)
            for repeat in range(1, count + 1):
                text = _output(truth, random.Random(f"{SEED}/{name}/{repeat}"), kinds[repeat - 1])
                with open(os.path.join(out, folder, f"{name}_pg1_repeat{repeat}.md"), "w", encoding="utf-8") as fh:
                    fh.write(text)
    with open(os.path.join(out, "features.jsonl"), "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(test, ensure_ascii=False) + "\n" for test in features)


if __name__ == "__main__":
    build(sys.argv[1])
