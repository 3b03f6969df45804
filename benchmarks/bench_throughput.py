"""Bench-test and reward throughput on synthetic pages of realistic size (single process).

    python benchmarks/bench_throughput.py [--pages 40] [--page-bytes 3000] [--repeats 5] [--group 28]
        [--upstream SRC [--upstream-python PY] [--upstream-path DIR ...]]

Each page's output is its own text, lightly damaged (a few edited characters), so fuzzy matching and
failing tests are exercised as on real OCR. Prints tests/s per test type and for the mix of present,
absent, order, table and baseline tests; math tests with the equation cache cleared (each equation
rendered by KaTeX once, as in a real bench); rewards per GRPO group of --group completions of about
--page-bytes each; medoid over 8 completions. Figures are medians over --repeats runs.

Baselines, measured in the same run on the same tests and outputs, in interleaved rounds:
- "per-test": the work olmOCR-bench's checks do for each test, with the same libraries (the output
  normalised again, rapidfuzz ``partial_ratio`` / fuzzysearch on the whole text, the output's tables parsed
  again), without this project's caches and shortcuts;
- with ``--upstream SRC`` (an allenai/olmocr checkout), its own check code, timed in a subprocess
  (``--upstream-python``, ``--upstream-path`` extra import paths); verdicts are compared too. Math is
  left out there, as its renderer needs a browser.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from olmocr.bench import equations
from olmocr.bench.normalize import normalize
from olmocr.bench.records import load_tests
from olmocr.formats.frontmatter import parse_document, write_document
from olmocr.formats.tables import html_tables, markdown_tables, parse_tables
from olmocr.rewards import unit_tests as bench_reward
from olmocr.rewards import text as text_rewards
from olmocr.synth.generator import generate

MIX = ("present", "absent", "order", "table", "baseline")
HERE = os.path.dirname(os.path.abspath(__file__))


def make_pages(out: str, pages: int, page_bytes: int) -> tuple[dict[str, str], list]:
    """Synthetic pages, each padded with other pages' text to about ``page_bytes`` of markdown, then
    damaged by a few character edits."""
    generate(out, pages, seed=123, layout_weights={"single_column": 3, "two_column": 2, "table": 2, "math": 2})
    bodies = {}
    for md in sorted(glob.glob(os.path.join(out, "pdfs", "*.md"))):
        with open(md, encoding="utf-8") as fh:
            bodies[os.path.basename(md)[:-3] + ".pdf"] = parse_document(fh.read())
    names = list(bodies)
    texts, rng = {}, random.Random(1)
    for i, name in enumerate(names):
        own = bodies[name][1]
        padding, j = "", i
        while len(own) + len(padding) < page_bytes:
            j = (j + 1) % len(names)
            padding += "\n\n" + bodies[names[j]][1]
        # The page's own text (which its tests are about) comes first; padding fills up to the size.
        texts[name] = perturb(own + padding[:max(0, page_bytes - len(own))], rng, rng.randint(0, 12))
    loaded = load_tests(os.path.join(out, "synth.jsonl"))
    assert not loaded.errors, loaded.errors
    return texts, [t for t in loaded.tests if t.pdf in texts], bodies


def timed(fn) -> float:
    # Each run starts cold, as a bench does: a page's output is normalised and parsed once.
    normalize.cache_clear()
    parse_tables.cache_clear()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_time(fn, repeats: int) -> float:
    return statistics.median(timed(fn) for _ in range(repeats))


def per_test_baseline():
    """Each test's check done the way olmOCR-bench's code does it: no caches, no shortcuts."""
    from fuzzysearch import find_near_matches
    from rapidfuzz import fuzz

    from olmocr.bench import checks

    plain = normalize.__wrapped__

    def present_or_absent(test, text):
        needle, hay = plain(test.text), plain(text)
        if not test.case_sensitive:
            needle, hay = needle.lower(), hay.lower()
        hit = fuzz.partial_ratio(needle, hay) / 100 >= 1 - test.max_diffs / max(len(needle), 1)
        return hit if test.type == "present" else not hit

    def order(test, text):
        hay = plain(text)
        before = find_near_matches(plain(test.before), hay, max_l_dist=test.max_diffs)
        after = find_near_matches(plain(test.after), hay, max_l_dist=test.max_diffs)
        return any(b.start < a.start for b in before for a in after)

    def table(test, text):
        markdown_tables(text), html_tables(text)  # parsed again for every test
        parse_tables.cache_clear()
        return checks.table(test, text, explain=True)

    return {"present": present_or_absent, "absent": present_or_absent, "order": order, "table": table,
            "baseline": lambda test, text: checks.baseline(test, text)}


class Upstream:
    """olmOCR-bench's own checks (from an allenai/olmocr checkout), timed in a subprocess round by round."""

    def __init__(self, args, cases: list[dict]):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([args.upstream, *args.upstream_path]))
        self.proc = subprocess.Popen([args.upstream_python, os.path.join(HERE, "upstream_checks.py")], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.verdicts = self._ask(json.dumps(cases))["verdicts"]

    def _ask(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            sys.exit("--upstream: its checks did not run (see the error above)")
        return json.loads(reply)

    def round(self) -> dict[str, float]:
        return self._ask("time")["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def test_rates(args, texts, tests) -> None:
    """Rounds of: each group of tests by ours, by the per-test baseline, by upstream; medians per group."""
    groups = {kind: [t for t in tests if t.type == kind] for kind in (*MIX, "math")}
    groups = {kind: group for kind, group in groups.items() if group}
    groups["mix"] = [t for t in tests if t.type in MIX]
    baseline = per_test_baseline()
    upstream = Upstream(args, [{"test": t.to_dict(), "text": texts[t.pdf]} for t in groups["mix"]]) \
        if args.upstream else None
    times: dict[str, dict[str, list[float]]] = {who: {k: [] for k in groups} for who in ("ours", "base", "up")}
    for _ in range(args.repeats):
        for kind, group in groups.items():
            if kind == "math":
                equations._cache.clear()  # every equation of a real bench is new
            times["ours"][kind].append(timed(lambda g=group: [t.run(texts[t.pdf]) for t in g]))
            if kind != "math":
                times["base"][kind].append(timed(lambda g=group: [baseline[t.type](t, texts[t.pdf]) for t in g]))
        if upstream:
            for kind, seconds in upstream.round().items():
                times["up"][kind].append(seconds)
    header = f"{'tests':<10}{'count':>7}{'ours tests/s':>15}{'per-test tests/s':>18}{'ratio':>8}"
    print(header + (f"{'upstream tests/s':>18}{'ratio':>8}" if upstream else ""))
    for kind, group in groups.items():
        ours = statistics.median(times["ours"][kind])
        line = f"{kind:<10}{len(group):>7}{len(group) / ours:>15.0f}"
        for who in ("base", "up") if upstream else ("base",):
            if times[who][kind]:
                other = statistics.median(times[who][kind])
                line += f"{len(group) / other:>18.0f}{other / ours:>7.2f}x"
        print(line)
    if upstream:
        ours_verdicts = [t.run(texts[t.pdf])[0] for t in groups["mix"]]
        agree = sum(a == b for a, b in zip(ours_verdicts, upstream.verdicts))
        print(f"verdicts equal to olmOCR-bench's checks on {agree} of {len(ours_verdicts)} tests")
        upstream.close()


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
    parser.add_argument("--upstream", help="an allenai/olmocr checkout whose checks to time as well")
    parser.add_argument("--upstream-python", default=sys.executable, help="python with that checkout's needs")
    parser.add_argument("--upstream-path", action="append", default=[], help="extra import path (repeatable)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        texts, tests, bodies = make_pages(tmp, args.pages, args.page_bytes)
    size = statistics.mean(len(t.encode()) for t in texts.values())
    print(f"{len(tests)} tests on {len(texts)} pages of {size:.0f} bytes on average (python {sys.version.split()[0]})")
    passed = sum(t.run(texts[t.pdf])[0] for t in tests)
    print(f"{passed} of {len(tests)} tests pass on the damaged outputs\n")
    test_rates(args, texts, tests)
    reward_rates(texts, tests, bodies, args.group, args.repeats)


if __name__ == "__main__":
    main()
