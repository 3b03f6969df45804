"""Checkpoint tools: training checkpoints to released models (prepare), FP8 compression (compress) and
the token-agreement check between a model and its reference (compare)."""
