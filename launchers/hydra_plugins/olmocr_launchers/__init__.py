"""Hydra launcher plugins of olmocr: ``hydra/launcher=olmocr_local`` (``cluster=local``: a sweep's jobs here, every
job checked before the first starts), ``olmocr_slurm`` (SLURM through submitit, with srun arguments, a dry run and
checks before submitting) and ``beaker`` (one Beaker experiment per job)."""
