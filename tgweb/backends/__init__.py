"""Backends: reference (NumPy interpreter), native (wgpu-py), browser (gpu.mjs)."""
