"""CUDA schedules: the generated source has the structure the schedule promises; parity
needs a GPU and is skipped without one."""

import re
import shutil
import subprocess

import pytest

from tvm_ext import cuda_target
from tvm_ext import kernels as K
from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.measurement.measure import verify

TARGET = cuda_target("sm_90")
CASES = [
    K.matmul(256, 256, 128),
    K.matmul(100, 70, 33),
    K.batch_matmul(4, 128, 128, 64),
    K.matmul(256, 256, 256, "float16"),
    K.matmul(100, 70, 40, "float16"),
    K.conv2d(1, 64, 56, 56, 64, 3, 3, 1, 1),
    K.conv2d(2, 3, 17, 13, 6, 3, 3, 2, 1),
    K.softmax(64, 1024),
    K.layernorm(37, 1000),
    K.rmsnorm(8, 33, "float16"),
    K.axpy(1 << 16),
]


def kernel_source(w) -> str:
    src = tvm_api.build(S.schedule(w, TARGET).mod, TARGET).imports[0].inspect_source()
    return src[src.index('extern "C" __global__') :]  # skip the header's macro definitions


def has_gpu() -> bool:
    return bool(tvm_api.cuda(0).exist)


@pytest.mark.parametrize("w", CASES, ids=lambda w: w.key)
def test_cuda_source_compiles_with_nvcc(w, tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    src = tvm_api.build(S.schedule(w, TARGET).mod, TARGET).imports[0].inspect_source()
    nvcc_compiles(src, tmp_path)


def nvcc_compiles(src: str, folder) -> None:
    """Compile CUDA source to a cubin for sm_90 with nvcc; fail with nvcc's message."""
    (folder / "k.cu").write_text(src)
    done = subprocess.run(
        ["nvcc", "-arch=sm_90", "-cubin", "-o", str(folder / "k.cubin"), str(folder / "k.cu")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    "w", [K.matmul(256, 256, 128), K.batch_matmul(4, 128, 128, 64)], ids=lambda w: w.key
)
def test_matmul_stages_cooperatively_vectorized_and_double_buffered(w):
    src = kernel_source(w)
    cfg = S.default_config(w, TARGET)
    assert f"__launch_bounds__({cfg.threads})" in src
    assert re.search(r"__shared__ .*float A_shared", src) and "B_shared" in src
    assert src.count("__syncthreads()") >= 2
    vec = {4: "float4", 2: "float2"}[cfg.vec]
    # Cooperative: each thread stores one vector per shared tile per stage, never a loop over
    # the whole tile (the lecture's version had every thread copy every element).
    stores = re.findall(rf"\*\({vec}\*\)\((A|B)_shared_ptr \+", src)
    per_stage = (cfg.bm * cfg.bk + cfg.bk * cfg.bn) // (cfg.threads * cfg.vec)
    assert len(stores) == 2 * per_stage  # prologue + pipelined body
    assert "& 1) *" in src  # two shared buffers alternate (double buffering)


def test_row_reductions_use_warp_shuffles():
    for w in (K.softmax(64, 1024), K.layernorm(37, 1000), K.rmsnorm(8, 33, "float16")):
        src = kernel_source(w)
        assert "__shfl_down_sync(" in src, w.key
        assert "threadIdx.x" in src and "blockIdx.x" in src


@pytest.mark.parametrize("shape", [(256, 256, 256), (100, 70, 40)])
def test_fp16_matmul_is_tensorized_onto_wmma(shape):
    w = K.matmul(*shape, dtype="float16")
    src = kernel_source(w)
    for call in (
        "wmma::fill_fragment",
        "wmma::load_matrix_sync",
        "wmma::mma_sync",
        "wmma::store_matrix_sync",
    ):
        assert call in src, call
    assert "__shared__" in src and "__syncthreads()" in src
    assert "tensorize" in str(S.schedule(w, TARGET).trace)


def test_wmma_needs_volta():
    with pytest.raises(ValueError, match="WMMA needs sm_70"):
        S.schedule(K.matmul(64, 64, 64, "float16"), {"kind": "cuda", "arch": "sm_61"})


def test_conv2d_stages_input_and_weights_in_shared_memory():
    src = kernel_source(K.conv2d(1, 64, 56, 56, 64, 3, 3, 1, 1))
    assert "pad_shared" in src and "W_shared" in src and "__syncthreads()" in src
    assert "pad_ptr" not in src  # padding happens while staging; no padded copy in global


def test_cuda_config_errors():
    with pytest.raises(ValueError, match="threads per block"):
        S.schedule(K.matmul(64, 64, 64), TARGET, bm=128, bn=128, tm=1, tn=1)
    with pytest.raises(ValueError, match="does not split evenly"):
        S.schedule(K.matmul(64, 64, 64), TARGET, bm=32, bn=32, tm=2, tn=2, vec=4)
    with pytest.raises(ValueError, match="multiple of 32"):
        S.schedule(K.softmax(4, 64), TARGET, threads=48)


@pytest.mark.gpu
@pytest.mark.parametrize("w", CASES, ids=lambda w: w.key)
def test_cuda_parity(w):
    if not has_gpu():
        pytest.skip("no CUDA device on this machine")
    verify(S.schedule(w, TARGET), w, TARGET)


def test_a_model_is_scheduled_for_cuda_by_the_same_interface(tmp_path):
    """``apply(mod, cuda)``: every PrimFunc of a zoo model (legalized, fused) is taken by a
    GPU rule (dlight's, behind our rule interface), the module builds, and nvcc compiles it."""
    from tvm_ext import models
    from tvm_ext.model_pipeline.compile import lower

    model = models.build("decoder", "small")
    lowered = lower(model.mod, TARGET, "forward")
    applied = S.apply(lowered, TARGET)
    rules = {f.name: f.rule for f in applied.functions}
    assert len(rules) >= 5 and all(r.startswith("dlight.") for r in rules.values()), rules
    assert rules[next(n for n in rules if "matmul" in n)] in ("dlight.Matmul", "dlight.GEMV")
    funcs = tvm_api.IRModule(
        {gv: f for gv, f in applied.mod.functions.items() if isinstance(f, tvm_api.PrimFunc)}
    )
    src = tvm_api.build(funcs, TARGET).imports[0].inspect_source()
    assert src.count("__global__") >= len(rules) and "threadIdx.x" in src
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    nvcc_compiles(src, tmp_path)
