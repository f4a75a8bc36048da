"""tgweb.io: saving and loading tensors (safetensors, pure Python)."""

from . import checkpoint, safetensors  # noqa: F401
from .safetensors import SafetensorsError  # noqa: F401
