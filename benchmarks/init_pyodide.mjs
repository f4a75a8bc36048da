// Initial values in Pyodide under Node (the pinned Pyodide of node_modules, NumPy absent as
// on the page): the seconds to draw every parameter of a sample, as Trainer.reset draws them,
// in bulk through web/bulk.mjs (registered as the worker registers it, tgweb_js.bulk) and,
// with --loop, by the per-value loop the browser ran before. Also the finite check of that
// many loaded values (tgweb.arrays.first_nonfinite).
//
//   node benchmarks/init_pyodide.mjs [--loop] [SAMPLE ...]      (default: addition shakespeare)
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as bulk from "../web/bulk.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const { loadPyodide } = await import(join(root, "node_modules", "pyodide", "pyodide.mjs"));
const args = process.argv.slice(2);
const loop = args.includes("--loop");
const samples = args.filter((a) => !a.startsWith("--"));

const py = await loadPyodide();
py.FS.mkdirTree("/repo");
py.FS.mount(py.FS.filesystems.NODEFS, { root }, "/repo");
if (!loop) py.registerJsModule("tgweb_js", { bulk });
py.globals.set("SAMPLES", py.toPy(samples.length ? samples : ["addition", "shakespeare"]));
const out = py.runPython(`
import sys, time
from js import process  # Node's: CPU time, apart from the wall time other jobs stretch
sys.path.insert(0, "/repo")
from tgweb.arrays import first_nonfinite
from tgweb.nn.module import param_rng
from tgweb.samples import get

def clock():
    return time.perf_counter(), process.cpuUsage().user / 1e6

def since(t):
    now = clock()
    return f"{now[0] - t[0]:.2f} s ({now[1] - t[1]:.2f} s CPU)"

rows = []
for name in SAMPLES:
    params = list(get(name).Model().named_parameters())
    t = clock()
    values = [p.init(p.shape, param_rng(0, n)) for n, p in params]
    drawn = since(t)
    t = clock()
    assert all(first_nonfinite(v) is None for v in values)
    rows.append(f"{name}: {sum(map(len, values)):,} values drawn in {drawn}, checked finite in {since(t)}")
"\\n".join(rows)
`);
console.log(`Pyodide ${py.version} under Node ${process.version}, ${loop ? "the per-value loop" : "web/bulk.mjs"}:\n${out}`);
