"""One epoch's batches cut by index from tensors held in memory — on the host
(`sweeps.data.loaders.TensorBatches`) or on the device
(`sweeps.data.device_loader.DeviceBatches`): one iterator, two ways to take examples."""
from __future__ import annotations

import torch


class IndexedBatches:
    """Iterates one epoch as ``len(self)`` batches of at most `batch_size` of `n`
    examples: a new permutation from `generator` (on the generator's device) each epoch when
    `shuffle`, else the stored order; a full batch is `whole` where that needs no
    order. A subclass sets ``n``, ``batch_size``, ``shuffle``, ``generator`` and defines
    `take`.
    """

    n: int
    batch_size: int
    shuffle: bool
    generator: torch.Generator

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def __iter__(self):
        whole = self.whole() if self.batch_size >= self.n else None
        if whole is not None:  # a full batch's mean gradient does not depend on the order: no copy
            yield whole
            return
        order = (torch.randperm(self.n, generator=self.generator, device=self.generator.device)
                 if self.shuffle else None)
        for start in range(0, self.n, self.batch_size):
            stop = start + self.batch_size
            yield self.take(order[start:stop] if order is not None else self.in_order(start, stop))

    def whole(self) -> tuple | None:
        """Every example as one batch, stored as it is (None: cut it like any batch)."""
        return None

    def in_order(self, start: int, stop: int):
        """The index of examples ``start`` to ``stop`` in the stored order (a slice: a view)."""
        return slice(start, stop)

    def take(self, pick) -> tuple:
        """The examples ``pick`` (an index tensor, or `in_order`'s) as one batch ``(x, y)``;
        a data-parallel rank takes its part of each step through this
        (`sweeps.train.distributed`)."""
        raise NotImplementedError
