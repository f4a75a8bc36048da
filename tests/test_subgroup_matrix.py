"""f16 products on subgroup matrices (chromium-experimental-subgroup-matrix): the
adapter's configurations in the Target, the cache key and the Program's features; the
kernel's real WGSL where the Target has the feature (and the plain f16 tiles where it
has not); and the same kernel with the matrix builtins emulated (Target.emulate_matrices)
run on lavapipe against the reference, forward and backward, in precision="mixed".
The real builtins run only where an adapter offers them: tests/browser/test_subgroup_matrix.py."""

from __future__ import annotations

import difflib
import re

import numpy as np
import pytest
from test_kernels import build, f, run_case

import tgweb as tg
from tgweb import nn
from tgweb.backends import native
from tgweb.codegen import sgmat
from tgweb.codegen.matmul import check_matrix_tile, matrix_tile
from tgweb.codegen.target import TUNING, Target, classify
from tgweb.lower import lower
from tgweb.progcache import adapter_class

pytestmark = pytest.mark.native  # tests/conftest.py: skipped without an adapter, fails in CI

MATRIX = "chromium-experimental-subgroup-matrix"
H200 = [  # adapter.info.subgroupMatrixConfigs on the H200 in Chromium 156 with f16 on
    {"componentType": "f16", "resultComponentType": "f32", "M": 16, "N": 16, "K": 16},
    {"componentType": "f16", "resultComponentType": "f16", "M": 16, "N": 16, "K": 16},
    {"componentType": "f16", "resultComponentType": "f32", "M": 16, "N": 8, "K": 16},
    {"componentType": "f16", "resultComponentType": "f32", "M": 16, "N": 8, "K": 8},
]
CFG = (("f16", "f32", 16, 16, 16),)


def gpu(
    *, configs=CFG, emulate=False, sizes=(32, 32), features=("shader-f16", "subgroups", MATRIX), **tuning
):
    return Target(
        "gpu",
        "test",
        "subgroup matrices" + (" (emulated) on lavapipe" if emulate else ""),
        tuning={**TUNING["gpu"], "split_k_chunk": 0, **tuning},
        features=features,
        subgroup_sizes=sizes,
        matrix_configs=configs,
        emulate_matrices=emulate,
    )


REAL = gpu()
EMU = gpu(emulate=True, features=("shader-f16", MATRIX))
PLAIN16 = Target(
    "gpu", "test", "f16 tiles", tuning=dict(TUNING["gpu"], split_k_chunk=0), features=("shader-f16",)
)


def _matrix_kernels(prog):
    return [k for k in prog.kernels if "var<workgroup> Cs: array<f32" in k.wgsl]


# ---- the adapter's configurations -------------------------------------------------------


def test_configs_come_from_adapter_info():
    info = {"vendor": "nvidia", "description": "NVIDIA H200", "subgroupMinSize": 32, "subgroupMaxSize": 32}
    t = classify(dict(info, features=["shader-f16", "subgroups", MATRIX], subgroupMatrixConfigs=H200))
    assert t.has(MATRIX) and ("f16", "f32", 16, 8, 8) in t.matrix_configs and len(t.matrix_configs) == 4
    assert sgmat.config(t) == (16, 16, 16) and sgmat.subgroup_size(t) == 32
    assert t.to_meta()["matrix_configs"][0] == ["f16", "f16", 16, 16, 16]
    # configurations without the feature (wgpu-py has neither) count for nothing
    assert classify(dict(info, features=["shader-f16"], subgroupMatrixConfigs=H200)).matrix_configs == ()
    # only an f16 -> f32 configuration of another shape: its M x N x K
    only = classify(dict(info, features=["shader-f16", "subgroups", MATRIX], subgroupMatrixConfigs=H200[2:3]))
    assert sgmat.config(only) == (16, 8, 16)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "f16",
        [None, 3, "x"],
        [{"componentType": "f16", "resultComponentType": "f32", "M": 16, "N": 16}],
        [{"componentType": "f16", "resultComponentType": "f32", "M": 16, "N": 16, "K": "16"}],
        [{"componentType": "f16", "resultComponentType": "f32", "M": 0, "N": 16, "K": 16}],
        [{"componentType": "f16", "resultComponentType": "f32", "M": 12.0, "N": 16, "K": 16}],
        [{"componentType": "bf16", "resultComponentType": "f32", "M": 16, "N": 16, "K": 16}],
        [{"componentType": "f16", "resultComponentType": "f16", "M": 16, "N": 16, "K": 16}],  # no f32 result
        [{"componentType": "f16", "resultComponentType": "f32", "M": 1 << 20, "N": 16, "K": 16}],
    ],
)
def test_bad_or_missing_configs_mean_no_matrix_path(raw):
    info = {"vendor": "nvidia", "subgroupMinSize": 32, "subgroupMaxSize": 32, "subgroupMatrixConfigs": raw}
    t = classify(dict(info, features=["shader-f16", "subgroups", MATRIX]))
    assert sgmat.config(t) is None
    prog = lower(build(lambda a, b: a @ b, {"a": f(70, 40), "b": f(40, 50)}, precision="mixed"), target=t)
    assert not _matrix_kernels(prog) and MATRIX not in prog.meta["features"]


def test_the_cache_key_holds_the_configs():
    def key(t):
        return adapter_class({"target": t, "limits": {}})

    assert key(REAL) != key(gpu(features=("shader-f16", "subgroups")))
    assert key(REAL) != key(gpu(configs=(("f16", "f32", 16, 8, 16),)))
    assert key(REAL)["target"]["matrix_configs"] == [["f16", "f32", 16, 16, 16]]
    assert key(REAL) != key(EMU)


# ---- which kernel, and its real WGSL ----------------------------------------------------


def _mixed(fn, specs, target, grad=True):
    return lower(build(fn, specs, grad=grad, precision="mixed"), target=target)


def test_real_wgsl_uses_the_builtins_and_lists_the_feature():
    prog = _mixed(lambda a, b: tg.gelu(a @ b), {"a": f(70, 40), "b": f(40, 50)}, REAL)
    ks = _matrix_kernels(prog)
    assert len(ks) == 3  # forward, and both products of the backward
    assert prog.meta["features"] == [MATRIX, "shader-f16", "subgroups"]
    for k in ks:
        text = k.wgsl
        assert text.startswith(
            "enable chromium_experimental_subgroup_matrix;\nenable f16;\nenable subgroups;\n"
        )
        assert "@builtin(subgroup_id) tg_subgroup_id: u32" in text and "let sg = tg_subgroup_id;" in text
        assert "var acc0_0 = subgroup_matrix_result<f32, 16, 16>();" in text
        assert "subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&As, " in text
        assert "subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&Bs, " in text
        assert "acc0_0 = subgroupMatrixMultiplyAccumulate(l0, r0, acc0_0);" in text
        assert "subgroupMatrixStore(&Cs, sg * 256u, acc0_0, false, 16u);" in text or (
            "subgroupMatrixStore(&Cs, sg * 256u, acc0_0, false, 16);" in text
        )
        assert "@workgroup_size(128, 1, 1)" in text  # 2 x 2 subgroups of 32
        # the builtins' offsets are uniform: nothing of local_invocation_id reaches them
        for line in text.splitlines():
            if "subgroupMatrix" in line:
                assert "li" not in line.replace("l0", "").replace("l1", "") and "lid" not in line


def test_newer_tints_forms_are_one_switch_away(monkeypatch):
    monkeypatch.setattr(sgmat, "FORMS", sgmat.TEMPLATE_FORMS)
    (k,) = _matrix_kernels(_mixed(lambda a, b: a.T @ b, {"a": f(40, 70), "b": f(40, 50)}, REAL, grad=False))
    assert "subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, col_major>(&As, " in k.wgsl
    assert "subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&Bs, " in k.wgsl
    assert "subgroupMatrixStore<row_major>(&Cs, sg * 256u, acc0_0, 16);" in k.wgsl


def test_the_M16_N8_K16_configuration_shapes_the_fragments():
    t = gpu(configs=(("f16", "f32", 16, 8, 16),))
    (k,) = _matrix_kernels(_mixed(lambda a, b: a @ b, {"a": f(70, 40), "b": f(40, 50)}, t, grad=False))
    assert "subgroup_matrix_result<f32, 8, 16>" in k.wgsl and "subgroup_matrix_right<f16, 8, 16>" in k.wgsl
    assert "acc1_3" in k.wgsl  # 32 x 32 per subgroup: 2 x 4 results of 16 x 8


@pytest.mark.parametrize(
    "target,why",
    [
        (gpu(features=("shader-f16", "subgroups")), "no feature"),
        (gpu(configs=(("f16", "f16", 16, 16, 16), ("u8", "u32", 8, 8, 32))), "no f16 -> f32 configuration"),
        (gpu(sizes=(16, 32)), "subgroup size not fixed"),
        (gpu(features=("shader-f16", MATRIX)), "no subgroups for subgroup_id"),
        (gpu(matrix_tiles=((64, 64, 16, 4, 4, 0),)), "no tile fits (512 invocations)"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_without_the_feature_the_plain_f16_tiles_run(target, why):
    prog = _mixed(lambda a, b: a @ b, {"a": f(70, 40), "b": f(40, 50)}, target)
    assert not _matrix_kernels(prog), why
    assert MATRIX not in prog.meta["features"]
    assert any("As: array<array<array<vec4<f32>" in k.wgsl for k in prog.kernels)


def test_float32_products_and_small_ones_keep_their_kernels():
    assert not _matrix_kernels(
        lower(build(lambda a, b: a @ b, {"a": f(70, 40), "b": f(40, 50)}), target=REAL)
    )
    small = _mixed(lambda a, b: a @ b, {"a": f(9, 40), "b": f(40, 50)}, REAL, grad=False)
    assert not _matrix_kernels(small)  # 9 rows: the direct kernel, as without matrices


def test_tiles_that_cannot_run_are_refused():
    dims = (16, 16, 16)
    # within WebGPU's default 16 KiB the tiles' rows go unpadded; with the H200's 48 KiB
    # the 128 x 128 tile with k slices of 32 and padded rows
    assert matrix_tile(4096, 4096, 1, TUNING["gpu"], dims, 32) == (64, 128, 16, 2, 2, 0)
    assert matrix_tile(100, 100, 1, TUNING["gpu"], dims, 32) == (64, 64, 16, 2, 2, 8)  # 16 KiB
    assert matrix_tile(4096, 4096, 1, TUNING["gpu"], dims, 32, 49152) == (128, 128, 32, 2, 2, 8)
    assert matrix_tile(100, 100, 1, TUNING["gpu"], dims, 32, 49152) == (64, 64, 16, 2, 2, 8)
    with pytest.raises(ValueError, match="workgroup memory"):
        check_matrix_tile(128, 128, 32, 2, 2, dims, 32, 40960, 8)
    with pytest.raises(ValueError, match="16-byte"):
        check_matrix_tile(64, 64, 16, 2, 2, dims, 32, 49152, 4)
    with pytest.raises(ValueError, match="workgroup memory"):
        check_matrix_tile(128, 128, 16, 2, 2, dims, 32)
    with pytest.raises(ValueError, match="invocations"):
        check_matrix_tile(64, 64, 16, 4, 4, (16, 16, 16), 32)
    with pytest.raises(ValueError, match="whole"):
        check_matrix_tile(64, 64, 8, 2, 2, dims, 32)
    for t in TUNING["gpu"]["matrix_tiles"] + TUNING["cpu"]["matrix_tiles"]:  # all fit the H200's
        check_matrix_tile(*t[:5], dims, 32, 49152, 8)
        check_matrix_tile(*t[:5], (16, 8, 16), 32, 49152, 8)
    assert TUNING["gpu"]["matrix_tiles"][-1][5] == 0  # and some tile fits any device
    check_matrix_tile(*TUNING["gpu"]["matrix_tiles"][-1][:5], dims, 32)


# ---- the emulated kernel against the reference ------------------------------------------


def _slice(a, b):
    return a[:, 3:43] @ b  # A read through a folded slice: its view's offset


def _heads(x, y, w):  # attention's head split and merge: read and written through strides
    q = x.reshape(2, 40, 2, 24).permute(0, 2, 1, 3)
    k = y.reshape(2, 40, 2, 24).permute(0, 2, 1, 3)
    v = w.reshape(2, 40, 2, 24).permute(0, 2, 1, 3)
    return ((q @ k.mT) @ v).permute(0, 2, 1, 3)


# products in a mixed graph (every operand an f16 copy, the backward's too): edges that
# are not multiples of the tile, k not a multiple of BK, vec4 and scalar loads, stored
# transposes, batches folded into rows and on dispatch z, folded slices, epilogues
CASES = [
    (lambda a, b: a @ b, {"a": f(70, 40), "b": f(40, 50)}),
    (lambda a, b: a @ b, {"a": f(130, 33), "b": f(33, 67)}),  # odd k and n: scalar loads
    (lambda a, b: a.T @ b, {"a": f(36, 72), "b": f(36, 68)}),
    (lambda a, b: tg.relu(a @ b.mT) * 0.5, {"a": f(3, 40, 36), "b": f(44, 36)}),
    (lambda a, b: a.mT @ b, {"a": f(2, 36, 40), "b": f(2, 36, 44)}),
    (_slice, {"a": f(66, 50), "b": f(40, 34)}),
    (lambda a, b: tg.gelu(a @ b), {"a": f(37, 20), "b": f(20, 46)}),  # f16 pairs stored
    (_heads, {"x": f(2, 40, 48), "y": f(2, 40, 48), "w": f(2, 40, 48)}),
]


@pytest.mark.parametrize("j", range(len(CASES)))
def test_emulated_matrices_match_reference(j):
    fn, specs = CASES[j]
    prog = run_case(fn, specs, target=EMU, precision="mixed", rtol=1e-3, atol=1e-4)
    assert _matrix_kernels(prog), [k.ops for k in prog.kernels]
    assert MATRIX not in prog.meta["features"] and "subgroups" not in prog.meta["features"]
    assert not any("subgroupMatrix" in k.wgsl for k in prog.kernels)
    if fn is _heads:  # a product written through strides (C's columns 48 apart)
        assert any("(n * 48u)" in k.wgsl for k in _matrix_kernels(prog))


def test_emulated_configs_and_tiles_match_reference():
    """M16 N8 K16 and M16 N8 K8 configurations, and the GPU class's 64 x 128 tile."""
    fn, specs = CASES[3]
    for cfg in (("f16", "f32", 16, 8, 16), ("f16", "f32", 16, 8, 8)):
        t = gpu(emulate=True, features=("shader-f16", MATRIX), configs=(cfg,))
        prog = run_case(fn, specs, target=t, precision="mixed", rtol=1e-3, atol=1e-4)
        assert all(f"array<f32, {16 * 8 // 32}>;" in k.wgsl for k in _matrix_kernels(prog))
    t = gpu(emulate=True, features=("shader-f16", MATRIX), matrix_tiles=((64, 128, 16, 2, 2, 0),))
    prog = run_case(
        lambda a, b: a @ b, {"a": f(70, 40), "b": f(40, 140)}, target=t, precision="mixed", rtol=1e-3
    )
    assert any("Bs: array<f16, 4096>" in k.wgsl for k in _matrix_kernels(prog))


@pytest.mark.parametrize("j", [0, 1, 2, 4, 7])
def test_emulated_padded_tiles_beyond_16_kib_match_reference(j):
    """A device with more workgroup memory (24 KiB asked for; lavapipe has 32): k slices
    of 32, the staged rows padded by 8 f16, f16 operands moved as words (eight a load
    where they line up, else four, else one by one); the Program asks for what it declares."""
    fn, specs = CASES[j]
    t = gpu(emulate=True, features=("shader-f16", MATRIX), matrix_tiles=((64, 64, 32, 2, 2, 0),))
    lim = {"maxComputeWorkgroupStorageSize": 24576}
    prog = run_case(fn, specs, target=t, precision="mixed", rtol=1e-3, atol=1e-4, limits=lim)
    ks = _matrix_kernels(prog)
    # two tiles of 64 rows x (32 + 8), or of 32 k x (64 + 8) where A is read along its rows
    assert ks and all(re.search(r"As: array<f16, (5120|4608)>", k.wgsl) for k in ks)
    assert 16384 < prog.meta["limits"]["maxComputeWorkgroupStorageSize"] <= 24576
    if j == 0:  # 70 x 40 @ 40 x 50: A's rows hold whole eights (B's 50 columns: one by one)
        k = ks[0]  # the forward's
        assert "var pa0: vec4<u32>;" in k.wgsl and "var pb0: f32;" in k.wgsl
        assert "let h3 = vec2<f16>(unpack2x16float(pa0.w));" in k.wgsl


def test_emulated_split_k_slices_match_reference():
    """A product of few tiles and a long k, split along k (the GPU class): the slices, a
    batch on dispatch z, run on matrices, and their sum after."""
    t = gpu(emulate=True, features=("shader-f16", MATRIX), split_k_chunk=128)
    prog = run_case(
        lambda a, b: a.T @ b, {"a": f(512, 24), "b": f(512, 40)}, target=t, precision="mixed", rtol=1e-3
    )
    assert any(k.dispatch[2] == 4 for k in _matrix_kernels(prog))


def test_emulated_text_is_the_real_text_but_the_builtins():
    """The lines that differ between the real and the emulated kernel are the matrix
    types, the builtins, the directives and the subgroup they need, and how a staged
    word's two f16 values are read (bitcast; emulated through f32, as Naga has no such
    bitcast); offsets, the subgroups' layout and the epilogue are the same text."""
    fn, specs = CASES[3]
    real = _matrix_kernels(_mixed(fn, specs, REAL))[0].wgsl.splitlines()
    emu = _matrix_kernels(_mixed(fn, specs, EMU))[0].wgsl.splitlines()
    only_real = [ln[2:].strip() for ln in difflib.ndiff(real, emu) if ln.startswith("- ")]
    only_emu = [ln[2:].strip() for ln in difflib.ndiff(real, emu) if ln.startswith("+ ")]
    matrix = re.compile(r"subgroup|^[{}]$|^let [lr]\d+ = |^acc\d+_\d+ = |^let h\d = bitcast<vec2<f16>>\(")
    assert only_real and all(matrix.search(ln) for ln in only_real), only_real
    emulated = re.compile(
        r"^fn main\(|\bm(sum|x|r|c|e|k)\b|^let [lr]\d+ = |^var acc\d+_\d+: array<f32, 8>;|^[{}]$|li / 32u"
        r"|^let h\d = vec2<f16>\(unpack2x16float\("
    )
    assert only_emu and all(emulated.search(ln) for ln in only_emu), only_emu


class MLP(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(24, 48)
        self.l2 = nn.Linear(48, 20)

    def forward(self, x):
        return self.l2(tg.gelu(self.l1(x)))


def _loss(m, x, y):
    return ((m(x) - y) ** 2).mean()


def test_mixed_training_on_emulated_matrices_follows_the_plain_f16_kernels(monkeypatch):
    rng = np.random.default_rng(0)
    batches = [
        {"x": rng.normal(size=(40, 24)).astype(np.float32), "y": rng.normal(size=(40, 20)).astype(np.float32)}
        for _ in range(12)
    ]
    runs = {}
    for name, target in (("matrices", EMU), ("plain", PLAIN16)):
        monkeypatch.setattr(native, "device_target", lambda t=target: t)
        t = tg.compile(
            MLP(),
            _loss,
            {"x": (40, 24), "y": (40, 20)},
            tg.optim.Adam(1e-2),
            backend="native",
            precision="mixed",
        )
        if name == "matrices":
            assert len(_matrix_kernels(t.program)) >= 4, [k.ops for k in t.program.kernels]
        else:
            assert not _matrix_kernels(t.program)
        runs[name] = [float(t.step(**b).loss) for b in batches]
        t.close()
    np.testing.assert_allclose(runs["matrices"], runs["plain"], rtol=1e-3)
    assert runs["matrices"][-1] < runs["matrices"][0]
