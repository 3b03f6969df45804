"""Mistakes a user can fix, raised where they are found and said in one line by every stage and launcher."""

from __future__ import annotations


class UserError(ValueError):
    """Something the user gave is wrong and theirs to fix: a key's value or type, a combination of settings, a path
    that is missing or is not what it should be, a tool this machine lacks. A stage or launcher says it in one
    ``error:`` line and exits with code 2 (``HYDRA_FULL_ERROR=1`` shows where it was raised). Any other error,
    ValueErrors raised inside torch, transformers or numpy included, keeps its traceback: it is a bug to debug, not
    a setting to change. A ValueError, so code that checks values (``pytest.raises(ValueError)``) still catches it."""
