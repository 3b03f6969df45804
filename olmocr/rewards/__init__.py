"""GRPO rewards: small functions with trl's reward signature, ``fn(completions, **columns)``, returning
one float per completion (or None where the reward does not apply)."""
