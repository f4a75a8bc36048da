// Installed before any page script by benchmarks/bench.py (page.add_init_script):
// counts WebGPU work the same way for every framework on the page: live and peak
// bytes of GPU buffers, compute dispatches, compute pipelines created.
(() => {
  if (typeof GPUDevice === "undefined" || globalThis.__gpuStats) return;
  const S = globalThis.__gpuStats = { live: 0, peak: 0, buffers: 0, dispatches: 0, pipelines: 0 };
  const sizes = new WeakMap();
  const createBuffer = GPUDevice.prototype.createBuffer;
  GPUDevice.prototype.createBuffer = function (desc) {
    const b = createBuffer.call(this, desc);
    sizes.set(b, desc.size);
    S.live += desc.size; S.buffers += 1;
    if (S.live > S.peak) S.peak = S.live;
    return b;
  };
  const destroy = GPUBuffer.prototype.destroy;
  GPUBuffer.prototype.destroy = function () {
    const n = sizes.get(this);
    if (n !== undefined) { S.live -= n; S.buffers -= 1; sizes.delete(this); }
    return destroy.call(this);
  };
  const dispatch = GPUComputePassEncoder.prototype.dispatchWorkgroups;
  GPUComputePassEncoder.prototype.dispatchWorkgroups = function (...a) {
    S.dispatches += 1;
    return dispatch.apply(this, a);
  };
  for (const name of ["createComputePipeline", "createComputePipelineAsync"]) {
    const f = GPUDevice.prototype[name];
    GPUDevice.prototype[name] = function (...a) { S.pipelines += 1; return f.apply(this, a); };
  }
})();
