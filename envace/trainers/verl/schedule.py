"""Steps and epochs of a verl run from the rows that are left after verl's overlong-prompt filter.

verl 0.9.1's V1 loop runs `while epoch < trainer.total_epochs and step <= total_training_steps`, and a
set `trainer.total_training_steps` replaces steps-per-epoch x epochs. With the launcher's paper setting
(470 steps, 1 epoch) and fewer than 470 x train_batch_size rows, verl would stop when the epoch ends:
no final checkpoint, no final validation, no message. `reconcile_epochs` gives the epochs that reach
the configured steps (the data is cycled, each epoch reshuffled by verl's sampler), and refuses data
that cannot fill one batch. envace's trainer applies it right after verl builds its dataloader.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def reconcile_epochs(*, rows: int, batch_size: int, steps: int | None, epochs: int,
                     files: Sequence[str] = ()) -> int:
    """Epochs that reach `steps` with `rows // batch_size` steps per epoch (verl drops the last partial
    batch); `steps` None keeps `epochs`. Raises ValueError when no full batch is left."""
    if batch_size < 1:
        raise ValueError(f"data.train_batch_size must be >= 1, got {batch_size}")
    per_epoch = rows // batch_size
    if per_epoch == 0:
        where = ", ".join(files) or "the training files"
        raise ValueError(f"{where}: {rows} training rows left after verl's overlong-prompt filter "
                         f"(data.max_prompt_length) cannot fill one batch of data.train_batch_size={batch_size}; "
                         "export more rows, raise max_prompt_length or lower train_batch_size")
    if steps is None:
        return epochs
    return max(epochs, math.ceil(int(steps) / per_epoch))
