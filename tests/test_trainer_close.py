"""trainer.close() and `with tg.compile(...) as trainer:` free the trainer's GPU
buffers, bind groups and pipelines (and those of programs attached to it), counted
through wgpu-py's object counts after garbage collection."""

from __future__ import annotations

import gc

import pytest

from tgweb import samples
from tgweb.backends import native
from tgweb.samples import sin

pytestmark = pytest.mark.native  # tests/conftest.py: skipped without an adapter, fails in CI


def gpu_objects() -> dict:
    import wgpu

    gc.collect()
    d = wgpu.diagnostics.object_counts.get_dict()
    out = {k: d[k]["count"] for k in ("Buffer", "BindGroup", "ComputePipeline")}
    out["bytes"] = d["Buffer"].get("resource_mem", 0)
    return out


def compile_sin():
    return samples.compile(sin, backend="native")


def test_close_frees_every_buffer_and_pipeline_and_a_new_model_leaves_nothing():
    before = gpu_objects()
    for _ in range(2):  # compiling again after closing leaves nothing behind either
        with compile_sin() as trainer:
            predict = trainer.attach(sin.forward, inputs=sin.EVAL_INPUTS)
            trainer.step(**sin.batch(0))
            predict.run(**sin.grid())
            held = gpu_objects()
            # (pipelines other tests' open programs share stay; so only >= there)
            assert held["Buffer"] > before["Buffer"] and held["ComputePipeline"] >= before["ComputePipeline"]
            assert held["BindGroup"] > before["BindGroup"] and held["bytes"] > before["bytes"]
        assert gpu_objects() == before
    with pytest.raises(RuntimeError, match="closed"):
        trainer.step(**sin.batch(1))
    with pytest.raises(RuntimeError, match="closed"):
        predict.run(**sin.grid())
    trainer.close()  # twice is harmless


def test_closing_one_trainer_leaves_another_running():
    a, b = compile_sin(), compile_sin()  # the same kernels: pipelines are shared
    a.step(**sin.batch(0))
    a.close()
    r = b.step(**sin.batch(0))
    assert r.ok
    b.close()


def test_an_inference_program_closes_on_its_own_and_the_trainer_runs_on():
    with compile_sin() as trainer:
        trainer.step(**sin.batch(0))
        before = gpu_objects()
        fixed = trainer.attach(sin.forward, inputs=sin.EVAL_INPUTS)
        free = trainer.attach(sin.forward, inputs={"x": (None, 1)})
        fixed.run(**sin.grid())
        free.run(x=[[0.5]] * 3)
        assert gpu_objects()["Buffer"] > before["Buffer"]
        fixed.close()
        free.close()
        assert gpu_objects() == before
        with pytest.raises(RuntimeError, match="inference program was closed"):
            fixed.run(**sin.grid())
        with pytest.raises(RuntimeError, match="inference program was closed"):
            free.run(x=[[0.5]] * 3)
        fixed.close()  # twice is harmless
        assert trainer.step(**sin.batch(1)).ok


def test_a_runtime_of_a_forgotten_device_frees_nothing_of_the_new_one():
    """After the device is replaced (as on a loss), closing a Runtime of the old device
    leaves the new device's pipelines to the Runtimes that use them, and closing those
    frees them."""
    old = compile_sin()
    native.forget_device()
    new = compile_sin()
    texts = {k.wgsl for k in new.program.kernels}
    old.close()
    assert texts <= set(native._PIPELINES)
    assert new.step(**sin.batch(0)).ok
    new.close()
    assert not texts & set(native._PIPELINES)
