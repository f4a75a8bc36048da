// tools/h200_attention_check.py's page side: an async function of the data's URL
(async (dataUrl) => {
  const gpu = await import("/web/gpu.mjs");
  const data = await (await fetch(dataUrl)).json();
  const f32 = (b64) => { const s = atob(b64); const u = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i); return new Float32Array(u.buffer); };
  const adapter = await navigator.gpu.requestAdapter();
  const info = gpu.adapterInfo(adapter);
  const lines = [`adapter: ${JSON.stringify(info)}`];
  for (const f of ["shader-f16", "chromium-experimental-subgroup-matrix"]) {
    if (!adapter.features.has(f)) lines.push(`MISSING FEATURE ${f}: the matrix cases cannot run`);
  }
  async function device(program) {
    const p = gpu.parseProgram(program);
    const requiredLimits = {};
    for (const [k, v] of Object.entries(gpu.programLimits(p))) {
      if (k in adapter.limits && v > 0) requiredLimits[k] = adapter.limits[k];
    }
    const feats = [...(p.meta.features || [])];
    if (adapter.features.has("timestamp-query")) feats.push("timestamp-query");
    const d = await adapter.requestDevice({ requiredFeatures: feats, requiredLimits });
    const errs = [];
    d.addEventListener("uncapturederror", (e) => errs.push(e.error.message));
    return [p, d, errs];
  }
  for (const c0 of data.cases) for (const [label, program] of Object.entries(c0.programs)) {
    const c = { ...c0, name: `${c0.name} ${label}`, program };
    try {
      const [p, d, errs] = await device(c.program);
      d.pushErrorScope("validation");
      const rt = await gpu.instantiate(d, p);
      const feeds = {};
      for (const [n, v] of Object.entries(c.inputs)) feeds[n] = f32(v);
      const names = Object.keys(c.want);
      const bufs = await rt.run(feeds, c.scalars, names.map((n) => ["outputs", n]));
      const verr = await d.popErrorScope();
      const parts = [];
      names.forEach((n, i) => {
        const got = new Float32Array(bufs[i]), w = f32(c.want[n]);
        let e = 0, m = 1e-30;
        for (let j = 0; j < w.length; j++) { e = Math.max(e, Math.abs(got[j] - w[j]) || (got[j] === w[j] ? 0 : Infinity)); m = Math.max(m, Math.abs(w[j])); }
        parts.push(`${n} ${(e / m).toExponential(1)}`);
      });
      lines.push(`${c.name}: ${parts.join(", ")}${verr ? " VALIDATION: " + verr.message : ""}${errs.length ? " ERRORS: " + errs.join(" | ") : ""}`);
      rt.destroy(); d.destroy();
    } catch (e) { lines.push(`${c.name}: FAILED ${e && e.message ? e.message.slice(0, 3000) : e}`); }
  }
  for (const c of data.timing) {
    try {
      const [p, d] = await device(c.program);
      if (!d.features.has("timestamp-query")) { lines.push("no timestamp-query: no timing"); break; }
      const rt = await gpu.instantiate(d, p);
      for (const [n, spec] of Object.entries(p.inputs)) {
        const a = new Float32Array(spec.shape.reduce((x, y) => x * y, 1));
        for (let i = 0; i < a.length; i++) a[i] = Math.random() * 2 - 1;
        rt.write("inputs", n, a);
      }
      const all = (pass, steps) => { for (const s of steps) { pass.setPipeline(s.pipeline); pass.setBindGroup(0, s.bindGroup); pass.dispatchWorkgroups(s.dispatch[0], s.dispatch[1] || 1, s.dispatch[2] || 1); } };
      { const enc = d.createCommandEncoder(); const pass = enc.beginComputePass(); all(pass, rt.steps); pass.end(); d.queue.submit([enc.finish()]); }
      const qs = d.createQuerySet({ type: "timestamp", count: 2 });
      const res = d.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
      const rd = d.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      for (const kind of ["sdpa", "sdpa_grad_q", "sdpa_grad_kv"]) {
        const steps = rt.steps.filter((s) => s.kernel.ops.includes(kind));
        const ms = [];
        for (let r = 0; r < 6; r++) {
          const enc = d.createCommandEncoder();
          const pass = enc.beginComputePass({ timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } });
          for (let i = 0; i < 10; i++) all(pass, steps);
          pass.end(); enc.resolveQuerySet(qs, 0, 2, res, 0); enc.copyBufferToBuffer(res, 0, rd, 0, 16);
          d.queue.submit([enc.finish()]);
          await rd.mapAsync(GPUMapMode.READ); const t = new BigUint64Array(rd.getMappedRange().slice(0)); rd.unmap();
          if (r > 0) ms.push(Number(t[1] - t[0]) / 1e6 / 10);
        }
        ms.sort((a, b) => a - b);
        lines.push(`time ${c.name} ${kind}: ${ms[2].toFixed(3)} ms (median of 5 passes of 10; ${steps.map((s) => s.kernel.name).join("+")}, dispatch ${JSON.stringify(steps[0].dispatch)})`);
      }
      rt.destroy(); d.destroy();
    } catch (e) { lines.push(`time ${c.name}: FAILED ${e && e.message ? e.message.slice(0, 3000) : e}`); }
  }
  return lines.join("\n");
})
