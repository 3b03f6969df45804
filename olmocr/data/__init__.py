"""Page data: the per-sample steps shared by training and inference, prompts, the dataset index and
the datasets built on them (training pairs, bench pages as prompts, preference pairs)."""
