"""Times olmOCR-bench's own checks: run with an allenai/olmocr checkout first on PYTHONPATH.

The first stdin line is [{"test": <test line>, "text": <output>}, ...]; it answers with the verdicts
({"verdicts": [...]}). Each further line asks for one timed round over those tests: it answers
{"seconds": {type: seconds, ..., "mix": seconds}}. Used by bench_throughput.py --upstream, which
interleaves these rounds with its own, so both see the same machine load.
"""

import json
import sys
import time

from olmocr.bench.tests import load_single_test  # the checkout's module, not this project's


def main() -> None:
    cases = [(load_single_test(dict(c["test"])), c["text"]) for c in json.loads(sys.stdin.readline())]
    print(json.dumps({"verdicts": [bool(test.run(text)[0]) for test, text in cases]}), flush=True)
    kinds = sorted({test.type for test, _ in cases})
    for _ in sys.stdin:
        seconds = {}
        for kind in (*kinds, "mix"):
            group = [c for c in cases if kind in ("mix", c[0].type)]
            start = time.perf_counter()
            for test, text in group:
                test.run(text)
            seconds[kind] = time.perf_counter() - start
        print(json.dumps({"seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
