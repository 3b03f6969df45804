"""Fuzzy substring search with fuzzysearch's results (``find_near_matches(..., max_l_dist=k)``), faster.

Order tests locate their texts as olmOCR-bench does, with fuzzysearch's n-gram Levenshtein search: the
pattern is cut into n-grams of ``len // (k + 1)`` characters; every exact occurrence of an n-gram is
extended to the right, then to the left, into the closest alignment of the rest of the pattern
(ties go to the longer extension); overlapping matches are then grouped and the best of each group
kept. fuzzysearch's wheels extend in pure Python over the whole window; an extension within ``k``
edits can only end within ``k`` characters of the pattern's length, so for long extensions this asks
rapidfuzz (C++) for those ``2k + 1`` distances instead. Short extensions, and patterns too short for
n-grams, keep fuzzysearch's own step-by-step rules (and code, for the latter).
"""

from __future__ import annotations

from typing import NamedTuple

from fuzzysearch.levenshtein import find_near_matches_levenshtein_linear_programming
from rapidfuzz.distance import Levenshtein


class Match(NamedTuple):
    start: int
    end: int
    dist: int


def _extend_short(rest: str, text: str, max_dist: int) -> tuple[int, int] | None:
    """(distance, length) of the text prefix closest to ``rest``, scanning prefixes by growing length:
    a later prefix wins ties, and the scan stops once no longer prefix can do better."""
    if not rest:
        return 0, 0
    column = list(range(1, len(rest) + 1))  # distances of rest[:i] to the empty prefix
    best, best_length = len(rest), 0
    for length, ch in enumerate(text, start=1):
        diagonal, above = length - 1, length
        for i, wanted in enumerate(rest):
            left = column[i]
            above = column[i] = min(diagonal + (ch != wanted), left + 1, above + 1)
            diagonal = left
        if above <= best:
            best, best_length = above, length
        elif min(column) >= best:
            break
    return (best, best_length) if best <= max_dist else None


def _extend_long(rest: str, text: str, max_dist: int) -> tuple[int, int] | None:
    """The same for a long ``rest``: the closest prefix within ``max_dist``, the longest on ties."""
    m = len(rest)
    best, best_length = m, 0
    for length in range(max(1, m - max_dist), min(len(text), m + max_dist) + 1):
        dist = Levenshtein.distance(rest, text[:length], score_cutoff=max_dist)
        if dist <= best:
            best, best_length = dist, length
    return (best, best_length) if best <= max_dist else None


def _extend(rest: str, text: str, max_dist: int) -> tuple[int, int] | None:
    if len(rest) > max(2 * max_dist, 10):
        return _extend_long(rest, text, max_dist)
    return _extend_short(rest, text, max_dist)


def near_matches(pattern: str, text: str, max_dist: int) -> list[Match]:
    """Every match fuzzysearch's Levenshtein search yields (before grouping), in its order."""
    m, n = len(pattern), len(text)
    size = m // (max_dist + 1)
    if size < 3:
        return [Match(x.start, x.end, x.dist)
                for x in find_near_matches_levenshtein_linear_programming(pattern, text, max_dist)]
    out = []
    for first in range(0, m - size + 1, size):
        gram, before, after = pattern[first:first + size], pattern[:first][::-1], pattern[first + size:]
        lo, hi = max(0, first - max_dist), min(n, n - m + first + size + max_dist)
        at = text.find(gram, lo, hi)
        while at >= 0:
            right = _extend(after, text[at + size:at - first + m + max_dist], max_dist)
            if right is not None:
                left_budget = max_dist - right[0]
                left = _extend(before, text[max(0, at - first - left_budget):at][::-1], left_budget)
                if left is not None:
                    out.append(Match(at - left[1], at + size + right[1], left[0] + right[0]))
            at = text.find(gram, at + 1, hi)
    return out


def match_starts(pattern: str, text: str, max_dist: int) -> list[int]:
    """Starts of the matches fuzzysearch reports: overlapping matches grouped, the best of each group
    kept (fewest edits, then longest). Where several are equally good fuzzysearch's pick depends on
    Python's string hashing, so its verdicts can change between runs; here the earliest wins."""
    if max_dist == 0:
        starts, at = [], text.find(pattern)
        while at >= 0:
            starts.append(at)
            at = text.find(pattern, at + 1)
        return starts
    groups: list[tuple[int, int, list[Match]]] = []
    for match in near_matches(pattern, text, max_dist):
        touching = [g for g in groups if not (match.end <= g[0] or match.start >= g[1])]
        members = [match] + [x for g in touching for x in g[2]]
        groups = [g for g in groups if all(g is not t for t in touching)]
        groups.append((min(x.start for x in members), max(x.end for x in members), members))
    return [min(members, key=lambda x: (x.dist, x.start - x.end, x.start)).start for _, _, members in groups]
