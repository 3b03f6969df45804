"""LaTeX to MathML through KaTeX, run under Node: one long-lived process per Python process.

Bench math tests compare equations by their MathML; HTML reports show equations as MathML, which browsers
draw without fonts or scripts. KaTeX is installed from the npm registry by ``scripts/setup.sh`` into
``katex/node_modules`` beside this file, pinned by its lock file.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import threading

from olmocr.errors import UserError

KATEX_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "katex")


class KatexError(ValueError):
    """The TeX does not parse in KaTeX."""


class Katex:
    """A Node process running KaTeX; TeX in, MathML out, one JSON line each way."""

    def __init__(self, node: str | None = None):
        self.node = node or os.environ.get("OLMOCR_NODE") or shutil.which("node")
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        if not self.node:
            raise UserError("math tests need Node.js to run KaTeX: install it (`bash scripts/setup.sh` does, "
                            "as root) or set OLMOCR_NODE to a node binary")
        if not os.path.isdir(os.path.join(KATEX_DIR, "node_modules", "katex")):
            raise UserError(f"math tests need KaTeX: run `npm ci --prefix {KATEX_DIR}` "
                            "(`bash scripts/setup.sh` does)")
        return subprocess.Popen([self.node, os.path.join(KATEX_DIR, "render.js")], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                                bufsize=1)

    def mathml(self, tex: str) -> str:
        with self._lock:
            for attempt in range(2):  # a process that died (killed, out of memory) is restarted once
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = self._start()
                try:
                    self._proc.stdin.write(json.dumps(tex) + "\n")
                    self._proc.stdin.flush()
                    line = self._proc.stdout.readline()
                except (BrokenPipeError, OSError):
                    line = ""
                if line:
                    break
                error = self._proc.stderr.read().strip() if self._proc.poll() is not None else ""
                self._proc = None
                if attempt:
                    raise RuntimeError(f"the KaTeX process stopped: {error or 'no output'}")
        reply = json.loads(line)
        if "error" in reply:
            raise KatexError(reply["error"])
        return reply["mathml"]

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait(timeout=5)
        self._proc = None


_katex: Katex | None = None


def _renderer() -> Katex:
    global _katex
    if _katex is None:
        _katex = Katex()
        atexit.register(_katex.close)
    return _katex


def mathml(tex: str) -> str:
    """KaTeX's MathML of an equation; raises KatexError when KaTeX rejects it."""
    return _renderer().mathml(tex)
