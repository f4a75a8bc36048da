"""WGSL generation: one emitter per op family, and the Program they fill."""
