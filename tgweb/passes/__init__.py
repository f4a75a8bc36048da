"""Graph passes that ask the op registry (never naming kinds, never importing codegen):
views (permutes, slices and reshapes read or written through strides), fusion (which
nodes share a kernel), remat (recompute a value instead of keeping it stored) and plan
(which buffer and offset holds each stored value). Dead code is no pass of its own:
tgweb.lower.computed_nodes keeps only the nodes the outputs, captures and updates reach."""
