"""Hooks into libraries' private internals, one module per library, for what their public extension points do not
serve. Each hook names the private attribute it replaces and why; ``tests/test_private.py`` fails naming the hook
when a pinned version changes what it replaces. Nothing outside this package touches a library's privates."""

from typing import NamedTuple


class Hook(NamedTuple):
    """One hook: the private attribute it replaces or calls (``module.Class.name``), the parameters it relies on
    (in order; empty where it passes every argument through), and why no public extension point serves."""

    replaces: str
    needs: tuple[str, ...]
    why: str
