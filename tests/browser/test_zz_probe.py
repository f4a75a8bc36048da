from .conftest import py

def test_probe(page):
    print(py(page, '''
import time
import tgweb as tg
from tgweb import progcache
from tgweb.samples import sin, addition
out = {}
for name, m in (("sin", sin), ("addition", addition)):
  for i in range(2):
    t0 = time.perf_counter()
    with progcache.keyed("probe" + name, "probe"):
        tr = tg.compile(m.Model(), m.loss_fn, inputs=m.INPUTS, optimizer=m.OPTIMIZER, seed=0)
    t1 = time.perf_counter()
    if name == "sin":
        p = tr.attach(sin.forward, inputs=sin.EVAL_INPUTS)
    t2 = time.perf_counter()
    r = tr.step(**m.batch(0)).loss
    t3 = time.perf_counter()
    out[name + str(i)] = (progcache.last["outcome"], round(t1-t0,3), round(t2-t1,3), round(t3-t2,3))
    tr.close()
    if i == 0:
        import js
        from pyodide.ffi import run_sync
        run_sync(js.Promise.new(lambda res, rej: js.setTimeout(res, 500)))
out
'''))
