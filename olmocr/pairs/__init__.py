"""Preference pairs for DPO, mined from a model's own samples and ranked by the reward functions."""
