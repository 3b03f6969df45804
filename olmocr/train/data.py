"""Epoch-seeded, resumable, rank-sharded sampling of the training mixture."""

from __future__ import annotations

import multiprocessing.context
import signal

import torch
from torch.utils.data import DataLoader, Sampler


class ResumableSampler(Sampler[int]):
    """Indices of one epoch: a permutation seeded by (seed, epoch), started at a global ``position`` and
    dealt round-robin to ``world_size`` ranks. Resuming at the same position gives the same stream."""

    def __init__(self, length: int, seed: int, epoch: int, position: int = 0, rank: int = 0, world_size: int = 1,
                 shuffle: bool = True):
        self.length, self.seed, self.epoch = length, seed, epoch
        self.position, self.rank, self.world_size, self.shuffle = position, rank, world_size, shuffle

    def order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.length))
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return torch.randperm(self.length, generator=generator).tolist()

    def _remaining(self) -> list[int]:
        rest = self.order()[self.position:]
        # Every rank gets the same number of indices (wrapping around), so ranks finish epochs together.
        return rest + rest[: (-len(rest)) % self.world_size]

    def __iter__(self):
        return iter(self._remaining()[self.rank:: self.world_size])

    def __len__(self) -> int:
        return -(-(self.length - self.position) // self.world_size)


JOB_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def deaf_to_job_signals(worker_id: int) -> None:
    """A loader worker leaves the job's signals to the trainer. A scheduler that requeues a job sends SIGTERM
    to every process of the job, and a worker dying of it made the trainer raise ("DataLoader worker …
    killed by signal") while the scheduler ran the job again; a preemption notice (SIGUSR1/2) reached the
    worker with the trainer's own handler (forked with it), which then requeued the job and wrote its result
    a second time. Either way the submitting command reported a failure for a job that went on. Ctrl-C reaches
    every process of the terminal's group: the trainer stops after the step with a checkpoint. The
    trainer ends its workers (and they exit when it is gone); SIGKILL still ends them with the job.
    Started by :class:`WorkerContext`, the worker has held these signals blocked since its fork: one that
    came before this runs is dropped here instead of killing it."""
    for sig in JOB_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, JOB_SIGNALS)


class _WorkerProcess(multiprocessing.context.ForkProcess):
    def start(self):
        held = signal.pthread_sigmask(signal.SIG_BLOCK, JOB_SIGNALS)
        try:
            super().start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # the trainer's own arrive now


class WorkerContext(multiprocessing.context.ForkContext):
    """Loader workers forked with the job's signals blocked, until :func:`deaf_to_job_signals` (their
    ``worker_init_fn``) ignores them: a signal for the job while a worker starts cannot end it."""

    Process = _WorkerProcess


def epoch_loader(dataset, collator, batch_size: int, seed: int, epoch: int, position: int, rank: int,
                 world_size: int, num_workers: int, shuffle: bool = True) -> DataLoader:
    dataset.set_epoch(epoch)
    sampler = ResumableSampler(len(dataset), seed, epoch, position, rank, world_size, shuffle)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collator, num_workers=num_workers,
                      persistent_workers=False, pin_memory=torch.cuda.is_available(),
                      worker_init_fn=deaf_to_job_signals if num_workers else None,
                      multiprocessing_context=WorkerContext() if num_workers else None)
