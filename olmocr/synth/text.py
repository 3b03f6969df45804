"""Deterministic text for synthetic pages: word banks per language, sentences, titles, numbers."""

from __future__ import annotations

import random

WORDS = {
    "en": (
        "the of and to in is that for it as with was on be by this are from at or an which have not "
        "data model page text document table figure result method value system study analysis process "
        "section report research number results shown between during each first second through other "
        "level time average total sample measure increase reduce include provide based under following "
        "significant approach structure performance quality design general local annual river market "
        "energy water policy growth rate period region survey field layer signal network training error "
        "paper summary index review budget account letter notice schedule program project committee "
        "council member public service program county district school library museum garden harbour "
        "weather history account balance interest payment invoice order supply customer product price "
        "within across against among because before after while where when whose however therefore "
        "observed estimated reported measured compared computed described proposed obtained required "
        "small large early late high low new old common simple complex natural formal careful recent "
        "mean variance function equation matrix vector parameter variable constant series limit theorem"
    ).split(),
    "de": (
        "der die das und ist nicht mit von auf für eine einem den dem des sich auch als wird werden "
        "Bericht Daten Seite Tabelle Ergebnis Verfahren Wert Gemeinde Jahr Stadt Schule Wasser Energie "
        "zwischen während jeder erste zweite durch andere Ebene Zeit Anzahl gesamt Analyse Modell"
    ).split(),
    "fr": (
        "le la les et est pas avec de sur pour une un des du se aussi comme sera sont rapport données "
        "page tableau résultat méthode valeur commune année ville école eau énergie entre pendant chaque "
        "premier deuxième autre niveau temps nombre total analyse modèle étude"
    ).split(),
    "no": (
        "og er ikke med av på for en et de den det seg også som blir rapport data side tabell resultat "
        "metode verdi kommune år by skole vann energi mellom under hver første andre nivå tid antall "
        "totalt analyse modell undersøkelse"
    ).split(),
}

LANGUAGES = tuple(WORDS)


def sentence(rng: random.Random, lang: str = "en", min_words: int = 6, max_words: int = 16) -> str:
    words = [rng.choice(WORDS[lang]) for _ in range(rng.randint(min_words, max_words))]
    words[0] = words[0][0].upper() + words[0][1:]
    if rng.random() < 0.25:
        words.insert(rng.randint(1, len(words) - 1), str(rng.randint(2, 2024)))
    return " ".join(words) + rng.choice([".", ".", ".", ";", "?"]).replace(";", ".")


def paragraph(rng: random.Random, lang: str = "en", sentences: tuple[int, int] = (2, 5)) -> str:
    return " ".join(sentence(rng, lang) for _ in range(rng.randint(*sentences)))


def title(rng: random.Random, lang: str = "en", words: tuple[int, int] = (2, 6)) -> str:
    picked = [rng.choice(WORDS[lang]) for _ in range(rng.randint(*words))]
    return " ".join(w[0].upper() + w[1:] for w in picked)


MARKUP = [
    "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
    "is_table: False\nis_diagram: False\n---\n",
    "<table><thead><tr><th>Name</th><th>Value</th></tr></thead><tbody><tr><td>a</td><td>1.5</td></tr>"
    "<tr><td rowspan=\"2\" colspan=\"2\">b</td></tr></tbody></table>",
    "# Heading\n## Section 2.1\n**bold** *italic* - item 1\n- item 2\n1. first\n",
    "\\[ E = mc^{2} \\] \\( \\frac{a}{b} + \\sqrt{x} \\) \\alpha \\beta \\gamma \\sum_{i=1}^{n} x_i \\int_0^1 f(x)\\,dx",
    "![Figure 1: chart](page_72_100_300_200.png) 0123456789 %$&@#()[]{}<>=+-*/\\|_^~'\",.;:!?",
    "RAW_TEXT_START RAW_TEXT_END Page dimensions: 612.0x792.0 [72x700]",
]


def corpus_lines() -> list[str]:
    """Text the tiny tokenizer is trained on: every word bank, markup and LaTeX the targets use."""
    rng = random.Random(0)
    lines = [" ".join(words) for words in WORDS.values()]
    lines += [paragraph(rng, lang) for lang in LANGUAGES for _ in range(40)]
    return lines + MARKUP


def instruction_lines() -> list[str]:
    """What a model is told and the markup it writes, without a word of the banks: the prompts, front matter,
    markup and LaTeX. A tokenizer trained on these spells page text in letters and short pieces."""
    from olmocr.formats.prompts import build_prompt

    # The prompts the locally built models' tokenizers were first trained on, named: a prompt added later would
    # change their merges, and a cached model's tokenizer with them, without a new cache key.
    return [build_prompt(version, "") for version in ("v1", "v4", "brief")] + MARKUP


def structure_lines() -> list[str]:
    """:func:`instruction_lines`, the blocks prompts and the blocks' markup (an opening tag of every label, boxes,
    the closing tag): a tokenizer trained on these spells page text in letters, a block's markup in a few
    pieces and its box's numbers in digits."""
    from olmocr.formats.prompts import build_prompt
    from olmocr.formats.structure import LABELS

    # One box for every tag: numbers of many digits in the corpus would teach merges of digit pairs, and a box's
    # numbers would be spelled one way here and another there.
    tags = [f'<div data-label="{label}" data-bbox="0 0 1000 1000">\ntext\n</div>' for label in LABELS] * 64
    return instruction_lines() + [build_prompt(v, "") for v in ("blocks", "brief_blocks")] + tags
