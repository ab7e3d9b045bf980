"""torch's chunking, written once for the tests: what every DataParallel in this project must reproduce.

`torch.Tensor.chunk(n)` gives ceil(B / n) rows per chunk and the rest last, so fewer than n chunks
when the rows run out (5 rows on 4 devices: 2, 2, 1). Written from that rule, not from the code under
test. Imports neither torch nor JAX.
"""
from __future__ import annotations


def torch_chunk_sizes(batch: int, n: int) -> list[int]:
    """The rows of each chunk torch gives `batch` rows over `n` devices: [3, 3, 3, 1] for 10 on 4."""
    size = -(-batch // n)
    return [min(size, batch - start) for start in range(0, batch, size)]


def torch_chunks(batch: int, n: int) -> list[slice]:
    """The same chunks as slices of the batch: [0:3, 3:6, 6:9, 9:10] for 10 on 4."""
    size = -(-batch // n)
    return [slice(start, min(start + size, batch)) for start in range(0, batch, size)]
