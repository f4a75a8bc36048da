# ruff: noqa: E501  (JavaScript and WGSL embedded in strings)
"""web/gpu.mjs on hand-built Programs: standalone on the page's main thread (no
Pyodide), and through the Python browser backend in the worker."""

from __future__ import annotations

import json

from tgweb.program import Program

from .conftest import py, run_py

HEAD = "@group(0) @binding({i}) var<storage, {acc}> {name}: array<{ty}>;\n"


def wgsl(bindings, body, wg=64):
    decl = "".join(HEAD.format(i=i, acc=a, name=n, ty=t) for i, (n, a, t) in enumerate(bindings))
    return (
        decl + f"@compute @workgroup_size({wg})\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "  let i = gid.x;\n" + body + "\n}\n"
    )


def slot(buffer, shape, dtype="f32", offset=0):
    return {"buffer": buffer, "shape": list(shape), "dtype": dtype, "offset": offset}


def kernel(name, code, bindings, dispatch, ops=(), site=""):
    return {
        "name": name,
        "wgsl": code,
        "bindings": [{"buffer": b, "access": a} for b, a in bindings],
        "dispatch": list(dispatch),
        "ops": list(ops),
        "site": site,
    }


def program(buffers, kernels, **slots):
    p = {
        "buffers": [{"id": i, "size": s, "kind": k, "label": lab} for i, (s, k, lab) in enumerate(buffers)],
        "kernels": kernels,
        "inputs": {},
        "params": {},
        "states": {},
        "outputs": {},
        "captures": {},
        "scalars": [],
        "scalars_buffer": None,
        "meta": {},
        "version": 2,
    }
    p.update(slots)
    # as Python saves a Program: complete, with its layout (where a step's data and the
    # offsets go), which gpu.mjs reads
    return json.loads(Program.from_json(json.dumps(p)).to_json())


def vector_add(n=7):
    code = wgsl(
        [("a", "read", "f32"), ("b", "read", "f32"), ("c", "read_write", "f32")],
        f"  if (i < {n}u) {{ c[i] = a[i] + b[i]; }}",
    )
    return program(
        [(4 * n, "input", "a"), (4 * n, "param", "b"), (4 * n, "output", "c")],
        [
            kernel(
                "add",
                code,
                [(0, "read"), (1, "read"), (2, "read_write")],
                ((n + 63) // 64, 1, 1),
                ["add"],
                "test.py:1",
            )
        ],
        inputs={"a": slot(0, (n,))},
        params={"b": slot(1, (n,))},
        outputs={"c": slot(2, (n,))},
    )


def two_buffer_program():
    """x and y packed in one buffer (y at byte 16); sum and x*s packed in one output buffer;
    a state acc += x run by two kernels sharing one pipeline; an i32 capture; scalars s, k."""
    add_scale = wgsl(
        [("io", "read", "f32"), ("out", "read_write", "f32"), ("sc", "read", "u32")],
        "  if (i < 4u) {\n    let s = bitcast<f32>(sc[0]);\n"
        "    out[i] = io[i] + io[4u + i];\n    out[4u + i] = io[i] * s;\n  }",
    )
    acc = wgsl(
        [("io", "read", "f32"), ("acc", "read_write", "f32")], "  if (i < 4u) { acc[i] = acc[i] + io[i]; }"
    )
    idx = wgsl(
        [("io", "read", "f32"), ("ix", "read_write", "i32"), ("sc", "read", "u32")],
        "  if (i < 4u) { ix[i] = i32(io[i]) * i32(sc[1]); }",
    )
    return program(
        [
            (32, "input", "xy"),
            (32, "output", "outs"),
            (8, "scalars", "scalars"),
            (16, "state", "acc"),
            (16, "capture", "ix"),
        ],
        [
            kernel(
                "add_scale",
                add_scale,
                [(0, "read"), (1, "read_write"), (2, "read")],
                (1, 1, 1),
                ["add", "mul"],
            ),
            kernel("acc1", acc, [(0, "read"), (3, "read_write")], (1, 1, 1), ["add"]),
            kernel("acc2", acc, [(0, "read"), (3, "read_write")], (1, 1, 1), ["add"]),
            kernel("idx", idx, [(0, "read"), (4, "read_write"), (2, "read")], (1, 1, 1), ["cast"]),
        ],
        inputs={"x": slot(0, (2, 2)), "y": slot(0, (4,), offset=16)},
        outputs={"sum": slot(1, (4,)), "scaled": slot(1, (2, 2), offset=16)},
        states={"acc": slot(3, (4,))},
        captures={"ix": slot(4, (4,), "i32")},
        scalars=[{"name": "s", "type": "f32"}, {"name": "k", "type": "u32"}],
        scalars_buffer=2,
    )


def broken_program():
    bad = (
        "@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n"
        "@compute @workgroup_size(1)\nfn main() {\n"
        "  let v: f32 = vec2<f32>(1.0, 2.0);\n  o[0] = v;\n}\n"
    )
    return program(
        [(4, "output", "o")],
        [kernel("matmul_relu_3", bad, [(0, "read_write")], (1, 1, 1), ["matmul", "relu"], "model.py:12")],
        outputs={"o": slot(0, (1,))},
    )


STANDALONE = """async ([prog, inputs, scalars, reads, params]) => {
    const device = await gpu.requestDevice({program: prog});
    const rt = await gpu.instantiate(device, JSON.stringify(prog));
    for (const [n, v] of Object.entries(params)) rt.write("params", n, new Float32Array(v));
    const results = [];
    for (let step = 0; step < 2; step++) {
        const f32 = Object.fromEntries(Object.entries(inputs).map(([n, v]) => [n, new Float32Array(v)]));
        const bufs = await rt.run(f32, scalars, reads);
        results.push(bufs.map((b, i) => {
            const dtype = prog[reads[i][0]][reads[i][1]].dtype;
            return Array.from(dtype === "i32" ? new Int32Array(b) : new Float32Array(b));
        }));
    }
    const out = {results, pipelines: rt.pipelineCount, kernels: rt.steps.length};
    rt.destroy(); device.destroy();
    return out;
}"""


def test_vector_add_standalone(page):
    r = page.evaluate(
        STANDALONE,
        [
            vector_add(),
            {"a": [1, 2, 3, 4, 5, 6, 7]},
            {},
            [["outputs", "c"]],
            {"b": [10, 20, 30, 40, 50, 60, 70]},
        ],
    )
    assert r["results"][0] == [[11, 22, 33, 44, 55, 66, 77]]


def test_two_buffer_program_offsets_states_scalars_dedup(page):
    prog = two_buffer_program()
    reads = [["outputs", "scaled"], ["states", "acc"], ["captures", "ix"], ["outputs", "sum"]]
    r = page.evaluate(
        STANDALONE, [prog, {"x": [1, 2, 3, 4], "y": [10, 20, 30, 40]}, {"s": 0.5, "k": 3}, reads, {}]
    )
    assert r["kernels"] == 4 and r["pipelines"] == 3  # acc1 and acc2 share one pipeline
    first, second = r["results"]
    assert first[0] == [0.5, 1, 1.5, 2]
    assert first[1] == [2, 4, 6, 8]  # two kernels each add x
    assert first[2] == [3, 6, 9, 12]
    assert first[3] == [11, 22, 33, 44]
    assert second[1] == [4, 8, 12, 16]  # the state persists across steps


def test_kernel_texts_kept_once_run_as_in_place(page):
    """A kernel's "wgsl" as an index into the Program's "texts" (as Python writes it) runs as
    the text in place (the JSON of before), and an index out of range is refused by name."""
    prog = two_buffer_program()  # through Program.to_json: each distinct text once
    assert len(prog["texts"]) == 3 and [k["wgsl"] for k in prog["kernels"]] == [0, 1, 1, 2]
    before = dict(prog, kernels=[dict(k, wgsl=prog["texts"][k["wgsl"]]) for k in prog["kernels"]])
    del before["texts"]
    reads = [["outputs", "scaled"], ["states", "acc"], ["captures", "ix"], ["outputs", "sum"]]
    r = page.evaluate(
        STANDALONE, [prog, {"x": [1, 2, 3, 4], "y": [10, 20, 30, 40]}, {"s": 0.5, "k": 3}, reads, {}]
    )
    assert r["kernels"] == 4 and r["pipelines"] == 3
    assert r == page.evaluate(
        STANDALONE, [before, {"x": [1, 2, 3, 4], "y": [10, 20, 30, 40]}, {"s": 0.5, "k": 3}, reads, {}]
    )
    prog["kernels"][1]["wgsl"] = 3
    r = page.evaluate(
        """async (prog) => {
        try { await gpu.requestDevice({program: prog}); return null; } catch (e) { return [e.name, e.message]; } }""",
        prog,
    )
    assert r == ["ProgramError", "kernel 1: wgsl 3 is not an index into the 3 texts"]


def test_bad_inputs_are_rejected_before_the_gpu(page):
    r = page.evaluate(
        """async (prog) => {
        const device = await gpu.requestDevice({program: prog});
        const rt = await gpu.instantiate(device, prog);
        const errs = [];
        for (const inputs of [{}, {a: new Float32Array(6)}, {a: new Float32Array(7), z: new Float32Array(1)}]) {
            try { await rt.run(inputs, {}, [["outputs", "c"]]); errs.push(null); } catch (e) { errs.push(e.message); }
        }
        try { await rt.read("outputs", "nope"); } catch (e) { errs.push(e.message); }
        try { await gpu.instantiate(device, prog, {shared: {nope: rt.paramBuffer("b")}}); } catch (e) { errs.push(e.message); }
        const [c] = await rt.run({a: new Float32Array(7)}, {}, [["outputs", "c"]]);  // still usable
        device.destroy();
        return [errs, c.byteLength];
    }""",
        vector_add(),
    )
    errs, c_bytes = r
    assert "missing a" in errs[0]
    assert "expected 7 values" in errs[1] and "got 6" in errs[1]
    assert "unknown z" in errs[2]
    assert 'no output "nope"' in errs[3] and "c" in errs[3]
    assert "shared: the Program has no param or state nope" in errs[4]
    assert c_bytes == 28


def test_a_program_without_its_layout_is_refused_by_name(page):
    """gpu.mjs reads where a step's data and the offsets go from the Program; one saved
    before Programs carried it is refused, saying how to lay it out again."""
    prog = vector_add()
    del prog["layout"]
    r = page.evaluate(
        """async (prog) => {
        try { await gpu.requestDevice({program: prog}); return null; } catch (e) { return [e.name, e.message]; } }""",
        prog,
    )
    assert r == ["ProgramError", "the Program has no layout: load and save it again with tgweb"]


def test_wgsl_failure_names_op_site_and_line(page):
    r = page.evaluate(
        """async (prog) => {
        const device = await gpu.requestDevice({});
        try { await gpu.instantiate(device, prog); return null; }
        catch (e) { return {name: e.name, message: e.message, ops: e.ops, site: e.site, kernel: e.kernel}; }
        finally { device.destroy(); }
    }""",
        broken_program(),
    )
    assert r["name"] == "ProgramError"
    assert r["ops"] == ["matmul", "relu"] and r["site"] == "model.py:12" and r["kernel"] == "matmul_relu_3"
    assert (
        "WGSL compile failed" in r["message"] and "matmul" in r["message"] and "model.py:12" in r["message"]
    )
    assert "line 4" in r["message"] and "vec2<f32>(1.0, 2.0)" in r["message"]


def test_prewarm_hands_its_pipelines_to_instantiate_and_leaves_failures_to_it(page):
    """gpu.prewarm asks for a Program's pipelines ahead; an instantiate of it takes them all.
    A kernel that fails there reports nothing then, and the instantiate that needs it throws
    the same error as without prewarm."""
    r = page.evaluate(
        """async ([good, bad]) => {
        const device = await gpu.requestDevice({});
        try {
            const asked = [gpu.prewarm(device, good), gpu.prewarm(device, good), gpu.prewarm(device, bad)];
            const rt = await gpu.instantiate(device, good);
            const taken = [rt.prewarmed, rt.pipelineCount];
            try { await gpu.instantiate(device, bad); return [asked, taken, null]; }
            catch (e) { return [asked, taken, {name: e.name, message: e.message, kernel: e.kernel}]; }
        } finally { device.destroy(); }
    }""",
        [two_buffer_program(), broken_program()],
    )
    asked, taken, err = r
    assert asked == [3, 0, 1]  # asked once per pipeline, however often the Program is prewarmed
    assert taken == [3, 3]
    assert err["name"] == "ProgramError" and err["kernel"] == "matmul_relu_3"
    assert "WGSL compile failed" in err["message"] and "line 4" in err["message"]


def test_limits_over_the_device_are_named(page):
    prog = vector_add()
    prog["buffers"][1]["size"] = 1 << 40
    r = page.evaluate(
        """async (prog) => {
        try { await gpu.requestDevice({program: prog}); return null; } catch (e) { return e.message; } }""",
        prog,
    )
    assert "maxBufferSize" in r


def test_device_loss_is_named_by_later_calls(page):
    """gpu.mjs learns of a loss only from device.lost: onLost hears it, and every later call
    fails naming it, including a readback already under way when the device went."""
    r = page.evaluate(
        """async (prog) => {
        let heard = null;
        const device = await gpu.requestDevice({program: prog, onLost: (why) => { heard = why; }});
        const rt = await gpu.instantiate(device, prog);
        await rt.run({a: new Float32Array(7)}, {}, [["outputs", "c"]]);
        const a = new Float32Array(7);
        const errs = [];
        const inFlight = rt.run({a}, {}, [["outputs", "c"]]).then(() => null, (e) => [e.name, e.message, e.lost]);
        device.destroy();
        await device.lost;
        for (const f of [() => rt.run({a}, {}, []), () => rt.read("outputs", "c"), () => rt.write("params", "b", a)]) {
            try { await f(); errs.push(null); } catch (e) { errs.push([e.name, e.message, e.lost]); }
        }
        return {heard, errs, inFlight: await inFlight};
    }""",
        vector_add(),
    )
    assert r["heard"].startswith("the GPU device was lost (destroyed"), r
    for name, message, lost in r["errs"]:
        assert name == "ProgramError" and lost is True and message == r["heard"], r
    # run() was called before destroy(), its submit and readback came after: the failed map
    # waits for device.lost to name the loss
    assert r["inFlight"][2] is True and r["inFlight"][1].startswith(r["heard"]), r


# ---- the same through Python: tgweb.backends.browser in the worker ----------


def test_browser_runtime_from_python(page):
    prog = json.dumps(two_buffer_program())
    src = f"""
import array
from tgweb.program import Program
from tgweb.backends import browser
prog = Program.from_json({prog!r})
rt = browser.Runtime(prog)
out = []
for step in range(2):
    r = rt.run({{"x": array.array("f", [1, 2, 3, 4]), "y": memoryview(array.array("f", [10, 20, 30, 40]))}},
               {{"s": 0.5, "k": 3}}, [("outputs", "sum"), ("captures", "ix"), ("states", "acc")])
    out.append({{k[1]: (v.typecode, v.tolist()) for k, v in r.items()}})
rt.write("states", "acc", bytes(16))
acc = rt.read("states", "acc").tolist()
scaled = rt.read("outputs", "scaled").tolist()
many = rt.read_many([("outputs", "scaled"), ("states", "acc"), ("captures", "ix")])
assert [v.tolist() for v in many.values()] == [scaled, acc, [3, 6, 9, 12]], many
rt.close()
[out, acc, scaled]
"""
    out, acc, scaled = py(page, src)
    assert out[0]["sum"] == ["f", [11, 22, 33, 44]]
    assert out[0]["ix"] == ["i", [3, 6, 9, 12]]
    assert out[1]["acc"] == ["f", [4, 8, 12, 16]]
    assert acc == [0, 0, 0, 0] and scaled == [0.5, 1, 1.5, 2]


def test_steps_that_read_nothing_are_not_awaited_and_fail_at_once(page):
    """Steps that read nothing back return without suspending Python (all but one every
    YIELD_EVERY_S); each still runs on the GPU, in order, and a step that cannot be sent
    raises at that step, not at a later read."""
    prog = json.dumps(two_buffer_program())
    src = f"""
import array
from tgweb.program import Program
from tgweb.backends import browser
rt = browser.Runtime(Program.from_json({prog!r}))
x = {{"x": array.array("f", [1, 2, 3, 4]), "y": array.array("f", [10, 20, 30, 40])}}
got = [rt.submit(x, {{"s": 0.5, "k": 3}}, []) for _ in range(50)]
empty = [w() for w in got]
acc = rt.read("states", "acc").tolist()  # each of the 50 steps added 2 x to acc
def refused(r):
    try:
        r.submit(x, {{"s": 0.5, "k": 3}}, [])
    except browser.BrowserError as e:
        return str(e)
gone = browser.Runtime(Program.from_json({prog!r}))
gone._rt.destroy()  # gpu.mjs's instance gone under the Runtime: gpu.mjs throws at once
rt.close()
[empty == [{{}}] * 50, acc, refused(gone), refused(rt)]
"""
    all_empty, acc, gone, closed = py(page, src)
    assert all_empty and acc == [100, 200, 300, 400]
    assert "destroyed" in gone and "closed" in closed, (gone, closed)


def test_browser_runtime_rejects_bad_data_and_changes_nothing(page):
    prog = json.dumps(vector_add())
    src = f"""
import array
from tgweb.program import Program
from tgweb.backends import browser
rt = browser.Runtime(Program.from_json({prog!r}))
rt.write("params", "b", array.array("f", range(7)))
errors = []
for bad in ({{"a": array.array("f", range(6))}}, {{}}, {{"a": array.array("f", range(7)), "q": b""}}):
    try:
        rt.run(bad, {{}}, [("outputs", "c")])
    except ValueError as e:
        errors.append(str(e))
try:
    rt.write("params", "b", array.array("f", range(8)))
except ValueError as e:
    errors.append(str(e))
b = rt.read("params", "b").tolist()
c = rt.run({{"a": array.array("f", [1] * 7)}}, {{}}, [("outputs", "c")])[("outputs", "c")].tolist()
rt.close()
[errors, b, c]
"""
    errors, b, c = py(page, src)
    assert len(errors) == 4 and "expected 7 values" in errors[0] and "missing input(s) ['a']" in errors[1]
    assert "unexpected input(s) ['q']" in errors[2] and "expected 7 values" in errors[3]
    assert b == [0, 1, 2, 3, 4, 5, 6] and c == [1, 2, 3, 4, 5, 6, 7]


def test_wgsl_failure_reaches_the_page_from_python(page):
    prog = json.dumps(broken_program())
    src = f"""
from tgweb.program import Program
from tgweb.backends import browser
rt = browser.Runtime(Program.from_json({prog!r}))
"""
    status, err = run_py(page, src, filename="train.py")
    assert status == "error" and err["pyType"] == "BrowserError", err
    msg = err["message"]
    assert "WGSL compile failed" in msg and "matmul" in msg and "model.py:12" in msg and "line 4" in msg
    assert 'File "train.py", line 4' in msg


def broken_on_b():
    """broken_program's kernel, on a param b of vector_add's size (to share its b)."""
    broken = broken_program()
    broken["buffers"][0].update(size=28, kind="param", label="b")
    broken["params"], broken["outputs"] = {"b": slot(0, (7,))}, {}
    return broken


def test_a_program_on_anothers_buffers_compiles_while_python_goes_on(page):
    """In the worker, a Runtime sharing another's buffers (an attached program, a trainer's
    initial values) does not wait for its pipelines: it runs on the shared buffers once they
    are made, and a WGSL failure is raised at its first use, naming the kernel."""
    good, bad = json.dumps(vector_add()), json.dumps(broken_on_b())
    src = f"""
import array
from tgweb.program import Program
from tgweb.backends import browser
owner = browser.Runtime(Program.from_json({good!r}))
owner.write("params", "b", array.array("f", range(7)))
shared = {{"b": owner.param_handle("b")}}
other = browser.Runtime(Program.from_json({good!r}), shared)
waited = isinstance(other._rt, browser._Deferred) and other._rt._rt is None
c = other.run({{"a": array.array("f", [1] * 7)}}, {{}}, [("outputs", "c")])[("outputs", "c")].tolist()
broken = browser.Runtime(Program.from_json({bad!r}), shared)  # no error yet
try:
    broken.read("params", "b")
    failed = None
except browser.BrowserError as e:
    failed = [str(e), e.kernel, e.site]
broken.close()
other.close()
owner.close()
[waited, c, failed]
"""
    waited, c, failed = py(page, src)
    assert waited and c == [1, 2, 3, 4, 5, 6, 7]
    assert failed is not None and "WGSL compile failed" in failed[0], failed
    assert failed[1:] == ["matmul_relu_3", "model.py:12"]


def test_a_runtime_says_when_each_pipeline_was_asked_for_checked_and_made(page):
    """Runtime.pipelineTimes (tools/pipeline_times.py): one entry per pipeline, its kernel and
    text's length, and its times in order; a prewarmed pipeline's were taken when prewarm
    asked for it, before the instance."""
    prog = json.dumps(two_buffer_program())
    src = f"""
from tgweb.program import Program
from tgweb.backends import browser
p = Program.from_json({prog!r})
browser.prewarm(p)
rt = browser.Runtime(p)
r = rt._rt
rows = [[str(t.kernel), int(t.chars), t.asked, t.checked, t.made] for t in r.pipelineTimes]
out = [rows, int(r.pipelineCount), int(r.prewarmed), len({{k.wgsl for k in p.kernels}})]
rt.close()
out
"""
    rows, count, prewarmed, texts = py(page, src)
    assert len(rows) == count == prewarmed == texts > 1
    for kernel, chars, asked, checked, made in rows:
        assert kernel and chars > 100 and 0 < asked <= checked <= made, rows


def test_a_lowering_in_the_worker_asks_for_each_kernel_as_it_emits_it(page):
    """lower(ask=backends.kernel_asker("browser")), as tg.compile lowers a step in the
    worker: each kernel goes to the GPU as it is emitted (the GPU process checks the texts
    one after another, so the first start before the Program is whole), each distinct one
    once, so that a prewarm of the Program then asks for nothing more; a Program lowered
    without it still has its pipelines to ask for."""
    src = """
from tgweb import worker
from tgweb.backends import kernel_asker, lowering_for
from tgweb.compile import build_training_graph
from tgweb.lower import lower
from tgweb.optim.optimizers import from_spec
from tgweb.samples import addition, sin

def step(sample):
    return build_training_graph(sample.Model(), sample.loss_fn, sample.INPUTS, from_spec(sample.OPTIMIZER)[0])

h, device = worker.hooks(), lowering_for("browser")
ask, seen = kernel_asker("browser"), []
def counted(kernel):
    seen.append(kernel.name)
    ask(kernel)
asked = lower(step(sin), ask=counted, **device)
plain = lower(step(addition), **device)
texts = len({(tuple(b.access for b in k.bindings), k.wgsl) for k in asked.kernels})
[seen == [k.name for k in asked.kernels], texts, h.gpu.prewarm(h.device, asked.to_json()),
 h.gpu.prewarm(h.device, plain.to_json()), kernel_asker("native") is None]
"""
    in_order, texts, again, plain, native = py(page, src)
    assert in_order and texts > 1
    assert again == 0 and plain > 0 and native


def test_runtimes_share_the_pipelines_of_a_kernel_until_the_last_is_destroyed(page):
    """A Runtime takes the pipelines another made for the same kernels (a trainer's step and
    the programs attached to it share many), and runs as well; once every Runtime using them
    is destroyed they go, and the next one makes them again."""
    prog = json.dumps(two_buffer_program())
    src = f"""
import array
from tgweb.program import Program
from tgweb.backends import browser
p = Program.from_json({prog!r})
a = browser.Runtime(p)
b = browser.Runtime(p)
shared = [int(a._rt.prewarmed), int(b._rt.prewarmed), int(b._rt.pipelineCount)]
a.close()
c = browser.Runtime(p)  # b holds them still
kept = int(c._rt.prewarmed)
x = {{"x": array.array("f", [1, 2, 3, 4]), "y": array.array("f", [10, 20, 30, 40])}}
sums = [r.run(x, {{"s": 0.5, "k": 3}}, [("outputs", "sum")])[("outputs", "sum")].tolist() for r in (b, c)]
b.close(); c.close()
d = browser.Runtime(p)  # none holds them: made anew
out = [shared, kept, int(d._rt.prewarmed), sums]
d.close()
out
"""
    shared, kept, fresh, sums = py(page, src)
    assert shared[0] == 0 and shared[1] == shared[2] > 1, shared
    assert kept == shared[2]
    assert fresh == 0
    assert sums == [[11, 22, 33, 44]] * 2


def test_saved_program_runs_without_pyodide(page):
    """A Program compiled by tgweb in the worker, saved as JSON with its parameters, runs on
    the page's main thread with gpu.mjs alone and gives the worker's output."""
    saved = py(
        page,
        """
import array
import tgweb as tg
from tgweb import nn

class Net(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(3, 8)
        self.l2 = nn.Linear(8, 2)

    def forward(self, x):
        return tg.softplus(self.l2(tg.relu(self.l1(x))))

net_tr = tg.compile(Net(), lambda m, x: m(x).mean(), inputs={"x": (5, 3)}, optimizer=tg.optim.SGD(0.1),
                    backend="browser", seed=7)
net_inf = net_tr.attach(lambda m, x: m(x), inputs={"x": (5, 3)})
x = array.array("f", [0.1 * i - 0.7 for i in range(15)])
{"program": net_inf.program.to_json(), "x": list(x),
 "params": {k: list(v.data) for k, v in net_tr.params().items()},
 "want": list(net_inf.run(x=x).output.data)}
""",
    )
    got = page.evaluate(
        """async (saved) => {
        const program = JSON.parse(saved.program);
        const device = await gpu.requestDevice({program});
        const rt = await gpu.instantiate(device, program);
        for (const [name, values] of Object.entries(saved.params)) {
            if (name in program.params) rt.write("params", name, new Float32Array(values));
        }
        const out = Object.keys(program.outputs)[0];
        const [buf] = await rt.run({x: new Float32Array(saved.x)}, {}, [["outputs", out]]);
        device.destroy();
        return Array.from(new Float32Array(buf));
    }""",
        saved,
    )
    assert got == saved["want"]
