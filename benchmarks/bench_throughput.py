"""Bench-test and reward throughput on synthetic pages of realistic size (single process).

    python benchmarks/bench_throughput.py [--pages 40] [--page-bytes 3000] [--repeats 5] [--group 28]

Prints tests/s per test type and for the mix of present, absent, order, table and baseline tests;
math tests with the equation cache cleared (each equation rendered by KaTeX once, as in a real bench);
rewards per GRPO group of --group completions of about --page-bytes each; medoid over 8 completions.
Figures are medians over --repeats runs.

Baseline, measured in the same run on the same tests: present/absent by rapidfuzz ``partial_ratio``
against a 1 - max_diffs/len threshold and order by ``fuzzysearch.find_near_matches``, the library calls
olmocr 0.4.27's bench makes for these types (``pip install fuzzysearch`` to include it).
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import statistics
import sys
import tempfile
import time

from olmocr.bench import equations
from olmocr.bench.normalize import normalize
from olmocr.bench.records import load_tests
from olmocr.data.frontmatter import parse_document, write_document
from olmocr.rewards import bench as bench_reward
from olmocr.rewards import text as text_rewards
from olmocr.synth.generator import generate

MIX = ("present", "absent", "order", "table", "baseline")


def make_pages(out: str, pages: int, page_bytes: int) -> tuple[dict[str, str], list]:
    """Synthetic pages, each padded with other pages' text to about ``page_bytes`` of markdown."""
    generate(out, pages, seed=123, layout_weights={"single_column": 3, "two_column": 2, "table": 2, "math": 2})
    bodies = {}
    for md in sorted(glob.glob(os.path.join(out, "pdfs", "*.md"))):
        with open(md, encoding="utf-8") as fh:
            bodies[os.path.basename(md)[:-3] + ".pdf"] = parse_document(fh.read())
    names = list(bodies)
    texts = {}
    for i, name in enumerate(names):
        own = bodies[name][1]
        padding, j = "", i
        while len(own) + len(padding) < page_bytes:
            j = (j + 1) % len(names)
            padding += "\n\n" + bodies[names[j]][1]
        # The page's own text (which its tests are about) is kept whole; padding fills up to the size.
        texts[name] = own + padding[:max(0, page_bytes - len(own))]
    tests, errors = load_tests(os.path.join(out, "synth.jsonl"))
    assert not errors, errors
    return texts, [t for t in tests if t.pdf in texts], bodies


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        # Each run starts cold, as a bench does: a page's output is normalised once, by its first test.
        normalize.cache_clear()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def baseline_runner():
    from rapidfuzz import fuzz

    try:
        from fuzzysearch import find_near_matches
    except ImportError:
        return None

    def present_or_absent(test, text):
        needle, hay = normalize(test.text), normalize(text)
        if not test.case_sensitive:
            needle, hay = needle.lower(), hay.lower()
        hit = fuzz.partial_ratio(needle, hay) / 100 >= 1 - test.max_diffs / max(len(needle), 1)
        return hit if test.type == "present" else not hit

    def order(test, text):
        hay = normalize(text)
        before = find_near_matches(normalize(test.before), hay, max_l_dist=test.max_diffs)
        after = find_near_matches(normalize(test.after), hay, max_l_dist=test.max_diffs)
        return bool(before and after) and min(m.start for m in before) < max(m.start for m in after)

    return {"present": present_or_absent, "absent": present_or_absent, "order": order}


def test_rates(texts, tests, repeats) -> None:
    by_type: dict[str, list] = {}
    for t in tests:
        by_type.setdefault(t.type, []).append(t)
    baseline = baseline_runner()
    print(f"{'tests':<10}{'count':>7}{'ours tests/s':>15}{'baseline tests/s':>18}{'ratio':>8}")
    rows = [(kind, by_type[kind]) for kind in (*MIX, "math") if kind in by_type]
    rows.append(("mix", [t for t in tests if t.type in MIX]))
    for kind, group in rows:
        def ours(group=group, kind=kind):
            if kind == "math":
                equations._cache.clear()  # every equation of a real bench is new
            for t in group:
                t.run(texts[t.pdf])

        seconds = median_time(ours, repeats)
        line = f"{kind:<10}{len(group):>7}{len(group) / seconds:>15.0f}"
        if baseline and (kind in baseline or kind == "mix"):
            runnable = [t for t in group if t.type in baseline]
            base_seconds = median_time(lambda r=runnable: [baseline[t.type](t, texts[t.pdf]) for t in r], repeats)
            if kind == "mix":  # table and baseline tests have no baseline: count them at our speed
                rest = [t for t in group if t.type not in baseline]
                ours_rest = median_time(lambda rest=rest: [t.run(texts[t.pdf]) for t in rest], repeats)
                base_seconds += ours_rest
            line += f"{len(group) / base_seconds:>18.0f}{base_seconds / seconds:>7.2f}x"
        print(line)
    if baseline is None:
        print("(baseline skipped: pip install fuzzysearch)")


def perturb(text: str, rng: random.Random, edits: int) -> str:
    chars = list(text)
    for _ in range(edits):
        i = rng.randrange(len(chars))
        op = rng.random()
        if op < 0.4:
            chars[i] = rng.choice("abcdefghijklmnopqrstuvwxyz ")
        elif op < 0.7:
            del chars[i]
        else:
            chars.insert(i, rng.choice("abcdefghijklmnopqrstuvwxyz "))
    return "".join(chars)


def reward_rates(texts, tests, bodies, group: int, repeats: int) -> None:
    rng = random.Random(0)
    name = max(texts, key=lambda n: sum(t.pdf == n for t in tests))
    meta = bodies[name][0]
    page_tests = [t.to_dict() for t in tests if t.pdf == name]
    reference = write_document(meta, texts[name])
    completions = [write_document(meta, perturb(texts[name], rng, rng.randint(0, 60))) for _ in range(max(group, 8))]
    eight, completions = completions[:8], completions[:group]
    ids = [[1] * 700 + ([0] if i % 3 else [7]) for i in range(group)]
    columns = dict(prompts=[name] * group, tests=[page_tests] * group, reference=[reference] * group,
                   completion_ids=ids)
    calls = {
        "bench": lambda: bench_reward.bench(completions, **columns),
        "bench (macro)": lambda: bench_reward.bench(completions, macro=True, **columns),
        "medoid": lambda: text_rewards.medoid(completions, **columns),
        "edit_distance": lambda: text_rewards.edit_distance(completions, **columns),
        "front_matter": lambda: text_rewards.front_matter(completions, **columns),
        "element_count": lambda: text_rewards.element_count(completions, **columns),
        "rectangular_tables": lambda: text_rewards.rectangular_tables(completions, **columns),
        "eos": lambda: text_rewards.eos(completions, eos_token_ids=[0], **columns),
    }
    size = sum(len(c.encode()) for c in completions) / group
    print(f"\nrewards for a group of {group} completions of {size:.0f} bytes ({len(page_tests)} bench tests)")
    print(f"{'reward':<20}{'ms/group':>10}{'completions/s':>15}")
    total = 0.0
    for label, call in calls.items():
        seconds = median_time(call, repeats)
        total += seconds if label != "bench (macro)" else 0.0
        print(f"{label:<20}{1000 * seconds:>10.2f}{group / seconds:>15.0f}")
    print(f"{'all (one bench)':<20}{1000 * total:>10.2f}{group / total:>15.0f}")
    seconds = median_time(lambda: text_rewards.medoid(eight, prompts=["p"] * 8), max(repeats, 9))
    print(f"\nmedoid over 8 completions of {size:.0f} bytes: {1000 * seconds:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--page-bytes", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--group", type=int, default=28)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        texts, tests, bodies = make_pages(tmp, args.pages, args.page_bytes)
    size = statistics.mean(len(t.encode()) for t in texts.values())
    print(f"{len(tests)} tests on {len(texts)} pages of {size:.0f} bytes on average (python {sys.version.split()[0]})\n")
    for t in tests:  # every test passes on its own page, so timings are of the full check
        assert t.run(texts[t.pdf])[0], t.id
    test_rates(texts, tests, args.repeats)
    reward_rates(texts, tests, bodies, args.group, args.repeats)


if __name__ == "__main__":
    main()
