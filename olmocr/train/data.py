"""Epoch-seeded, resumable, rank-sharded sampling of the training mixture."""

from __future__ import annotations

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


def epoch_loader(dataset, collator, batch_size: int, seed: int, epoch: int, position: int, rank: int,
                 world_size: int, num_workers: int, shuffle: bool = True) -> DataLoader:
    dataset.set_epoch(epoch)
    sampler = ResumableSampler(len(dataset), seed, epoch, position, rank, world_size, shuffle)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collator, num_workers=num_workers,
                      persistent_workers=False, pin_memory=torch.cuda.is_available())
