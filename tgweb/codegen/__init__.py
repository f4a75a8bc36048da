"""WGSL code generation. common: text helpers (literals, index arithmetic, dispatch);
kernel: the kernel being built and the fused elementwise group inside it; matmul and
reduce: the kernel families that op kinds' registry entries name as their emitters.
Code here asks the op registry (tgweb.ir) what each kind is; it never imports tgweb.ops."""
