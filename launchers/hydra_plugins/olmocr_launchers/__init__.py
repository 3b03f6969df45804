"""Hydra launcher plugins of olmocr: ``hydra/launcher=olmocr_slurm`` (SLURM through submitit, with srun
arguments, a dry run and checks before submitting)."""
