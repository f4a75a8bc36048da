"""f16 products on subgroup matrices in Chromium. Where the adapter offers
chromium-experimental-subgroup-matrix with an f16 -> f32 configuration (the H200 with
Chromium's vulkan_enable_f16_on_nvidia), the real kernel, compiled for the page's own
adapter info (its configurations and subgroup size), runs through web/gpu.mjs against
the reference, forward and backward; elsewhere that test skips, naming the feature.
Where the adapter offers shader-f16, the emulated kernel (tests/test_subgroup_matrix.py)
runs through Chromium's WGSL compiler too. The same for attention on matrices,
forward and backward (tests/test_subgroup_attention.py)."""

from __future__ import annotations

import dataclasses

import pytest
from test_kernels import build, f
from test_subgroup_attention import CASES as ATTN_CASES
from test_subgroup_attention import attn_kernels
from test_subgroup_matrix import CASES, EMU, H200, MATRIX, _matrix_kernels

import tgweb as tg
from tgweb.codegen import sgmat
from tgweb.codegen.target import classify
from tgweb.lower import lower

from .conftest import run_against_reference

ADAPTER_INFO = "async () => gpu.adapterInfo(await navigator.gpu.requestAdapter())"


@pytest.fixture(scope="module")
def info(page):
    return page.evaluate(ADAPTER_INFO)


def test_adapter_info_carries_the_configs(page):
    """gpu.adapterInfo copies adapter.info.subgroupMatrixConfigs (GPUSubgroupMatrixConfig
    objects: getters, not own properties) to plain data, only with the feature; tgweb's
    Target reads them (a stand-in adapter with the H200's configurations)."""
    info = page.evaluate(
        """(configs) => {
        class Config { constructor(c) { this._c = c; } }
        for (const k of ["componentType", "resultComponentType", "M", "N", "K"])
          Object.defineProperty(Config.prototype, k, { get() { return this._c[k]; } });
        const adapter = (features) => ({ features: new Set(features), info: { vendor: "nvidia",
          description: "NVIDIA H200", subgroupMinSize: 32, subgroupMaxSize: 32,
          subgroupMatrixConfigs: configs.map((c) => new Config(c)) } });
        return [gpu.adapterInfo(adapter(["shader-f16", "subgroups", "%s"])),
                gpu.adapterInfo(adapter(["shader-f16", "subgroups"]))];
    }"""
        % MATRIX,
        H200,
    )
    assert info[0]["subgroupMatrixConfigs"] == H200 and "subgroupMatrixConfigs" not in info[1]
    assert sgmat.config(classify(info[0])) == (16, 16, 16) and sgmat.config(classify(info[1])) is None


def _need_matrices(info):
    target = classify(info)
    if sgmat.config(target) is None:
        pytest.skip(
            f"this Chromium's adapter ({info.get('description') or info.get('vendor')}) does not offer "
            f"{MATRIX} with an f16 -> f32 configuration, shader-f16, subgroups and one subgroup "
            f"size (features {info.get('features')}, configurations {info.get('subgroupMatrixConfigs')})"
        )
    return target


@pytest.mark.parametrize("j", range(len(CASES)))
def test_real_matrices_match_reference(page, info, j):
    target = _need_matrices(info)
    fn, specs = CASES[j]
    g = build(fn, specs, precision="mixed")
    prog = lower(g, target=target)
    assert _matrix_kernels(prog) and MATRIX in prog.meta["features"]
    assert MATRIX in run_against_reference(page, g, prog, rtol=1e-3, atol=1e-4)


ADAPTER_WORKGROUP_BYTES = (
    "async () => (await navigator.gpu.requestAdapter()).limits.maxComputeWorkgroupStorageSize"
)


@pytest.mark.parametrize("j", range(len(CASES)))
def test_real_matrices_with_the_adapters_workgroup_memory_match_reference(page, info, j):
    """Lowered for the adapter's maxComputeWorkgroupStorageSize (48 KiB on the H200), as
    the worker's device has it: the GPU class's larger tiles with padded rows (where they
    fit the product), the Program asking for the workgroup memory they declare."""
    target = _need_matrices(info)
    have = page.evaluate(ADAPTER_WORKGROUP_BYTES)
    fn, specs = CASES[j]
    g = build(fn, specs, precision="mixed")
    prog = lower(g, {"maxComputeWorkgroupStorageSize": have}, target=target)
    assert _matrix_kernels(prog) and prog.meta["limits"]["maxComputeWorkgroupStorageSize"] <= have
    assert MATRIX in run_against_reference(page, g, prog, rtol=1e-3, atol=1e-4)


def test_real_big_tiles_match_reference(page, info):
    """The 128 x 128 tile with k slices of 32 and padded rows, f16 operands staged eight
    values a load, on a product large enough to take it (where the adapter has 48 KiB)."""
    target = _need_matrices(info)
    have = page.evaluate(ADAPTER_WORKGROUP_BYTES)
    g = build(lambda a, b: tg.gelu(a @ b), {"a": f(264, 96), "b": f(96, 136)}, precision="mixed")
    tuning = dict(target.tuning, matrix_tiles=((128, 128, 32, 2, 2, 0),))
    prog = lower(
        g, {"maxComputeWorkgroupStorageSize": have}, target=dataclasses.replace(target, tuning=tuning)
    )
    if have < 45056:
        pytest.skip(f"the adapter offers {have} bytes of workgroup memory (the tile takes 45056)")
    ks = [k for k in _matrix_kernels(prog) if "As: array<f16, 10240>" in k.wgsl]  # 2 x 128 x (32 + 8)
    assert ks and all("vec4<u32>" in k.wgsl for k in ks)
    assert MATRIX in run_against_reference(page, g, prog, rtol=1e-3, atol=1e-4)


def test_emulated_matrices_compile_and_match_in_chromium(page, info):
    if "shader-f16" not in info.get("features", []):
        pytest.skip("this Chromium's adapter does not offer shader-f16")
    for fn, specs in CASES[:2] + CASES[-1:]:
        g = build(fn, specs, precision="mixed")
        prog = lower(g, target=EMU)
        assert _matrix_kernels(prog)
        run_against_reference(page, g, prog, rtol=1e-3, atol=1e-4)


# attention on matrices (codegen/attention_matrices.py): the forward, and the backward up to head dims
# of 64 (d128's backward: the plain kernels); no dropout here (the page's reference has no
# seed)
ATTN = ["plain-d16", "causal-d64", "d128", "odd-dims", "add-mask", "bool-mask", "fused-qkv"]


@pytest.mark.parametrize("name", ATTN)
def test_real_matrix_attention_matches_reference(page, info, name):
    """The real kernel compiled for the page's adapter: forward (rtol 2e-3, atol 5e-4 of
    the largest value: P enters P V as f16), then forward and backward (atol 3e-3:
    tests/test_subgroup_attention.py says why)."""
    target = _need_matrices(info)
    fn, specs = ATTN_CASES[name]
    for grad, atol in ((False, 5e-4), (True, 3e-3)):
        g = build(fn, specs, grad=grad, precision="mixed")
        prog = lower(g, target=target)
        assert len(attn_kernels(prog)) == 1 and MATRIX in prog.meta["features"]
        assert MATRIX in run_against_reference(page, g, prog, rtol=2e-3, atol=atol)


def test_emulated_matrix_attention_compiles_and_matches_in_chromium(page, info):
    if "shader-f16" not in info.get("features", []):
        pytest.skip("this Chromium's adapter does not offer shader-f16")
    for name in ("causal-d64", "bool-mask"):
        fn, specs = ATTN_CASES[name]
        g = build(fn, specs, grad=False, precision="mixed")
        prog = lower(g, target=EMU)
        assert attn_kernels(prog)
        run_against_reference(page, g, prog, rtol=2e-3, atol=5e-4)
