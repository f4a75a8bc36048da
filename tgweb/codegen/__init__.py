"""WGSL code generation. common: text helpers (literals, index arithmetic, dispatch);
kernel: the kernel being built and the fused elementwise group inside it; target: the
adapter's class and features; sgmat: subgroup matrices; random: the random streams'
hash; matmul, attention, conv and reduce: the kernel families that op kinds' registry
entries name as their emitters; select: the pipelined step's scalars. Code here asks
the op registry (tgweb.ir) what each kind is; it never imports tgweb.ops."""
