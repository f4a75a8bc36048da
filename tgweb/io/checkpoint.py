"""Checkpoints: a Trainer's whole state as one safetensors file.

    blob = checkpoint.save(trainer, metadata={"sample": "sin"})
    checkpoint.load(fresh_trainer, blob)      # the same next steps as trainer's

The file holds the parameters by name, the optimizer state as "optimizer.<name>"
(the page's download uses the same layout), and metadata strings "format"
("tgweb"), "steps", "calls", "seed", "schedule" (JSON) and "schedule_origin"
(see Trainer.checkpoint). Loading validates the file and every value before
anything is replaced.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from . import safetensors


def save(trainer: Any, metadata: dict[str, str] | None = None) -> bytes:
    """The trainer's checkpoint as safetensors bytes; metadata: extra strings."""
    tensors, meta = trainer.checkpoint()
    return safetensors.save(tensors, metadata={**(metadata or {}), **meta})


def load(trainer: Any, blob: bytes | bytearray | memoryview) -> dict[str, str]:
    """Restore the trainer from checkpoint bytes (atomic); returns the metadata."""
    tensors, meta = safetensors.load(blob)
    trainer.restore(tensors, meta)
    return meta


def save_file(trainer: Any, path, metadata: dict[str, str] | None = None) -> None:
    """Write the checkpoint to path atomically: a temporary file beside it, flushed to
    disk, then renamed over path, so a crash mid-write leaves the previous file whole."""
    data = save(trainer, metadata)
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def load_file(trainer: Any, path) -> dict[str, str]:
    with open(path, "rb") as f:
        return load(trainer, f.read())
