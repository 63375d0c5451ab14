"""Models the suite does not hold, as a user brings them: does each import, compile, match
torch, and how fast is it against torch eager and onnxruntime, side by side.

The rules were designed on the zoo and the real-model suite; this script checks them on
torchvision models and transformers architectures they were never measured on (squeeze-
excitation, grouped and 7x7 depthwise convolutions, shifted windows, dense concatenation; GQA,
ALiBi, parallel attention, disentangled attention), each at its library's defaults (a
decoder keeps ``use_cache=True``; attention is the library's default kind), seeded random
weights, batch 1. A model that fails gets a row saying where (import, compile, parity), not
a silent skip. Contenders and timer as in ``real_models.py`` (its ``contenders``): one
Python loop over a ready call, interleaved rounds, parity against torch eager first.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/unseen_models.py \
        [--models efficientnet_b0,qwen2] [--no-readme]
"""

from __future__ import annotations

import sys

from _unpin import rerun_unpinned  # noqa: E402

rerun_unpinned()  # before numpy loads OpenBLAS

import argparse  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import pandas as pd  # noqa: E402
from _common import (  # noqa: E402
    add_timing_args,
    as_numpy,
    blas_report,
    cpu_name,
    time_callable,
    write_section,
)
from real_models import contenders  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import tvm_ext  # noqa: E402
from tvm_ext.base import tvm_api  # noqa: E402
from tvm_ext.base.tvm_api import physical_cores  # noqa: E402
from tvm_ext.hardware.target import host_target, target_cpu  # noqa: E402
from tvm_ext.measurement.measure import check_parity  # noqa: E402
from tvm_ext.workloads import torch_libraries  # noqa: E402

VISION = ["efficientnet_b0", "mobilenet_v3_large", "regnet_y_400mf", "resnext50_32x4d",
          "swin_t", "convnext_tiny", "densenet121", "shufflenet_v2_x1_0",
          "inception_v3", "googlenet", "mnasnet0_5", "alexnet", "vit_b_32",
          "resnet18@2x199"]  # fmt: skip
# Vision models whose input is not 224 x 224 (the size they were trained at).
IMAGE_SIZE = {"inception_v3": 299}
# A model at a batch and an image size of its own: "name@BATCHxSIZE" (an odd size's maps
# shrink to 100, 50, 25, 13 and 7 pixels through the strides).
# transformers architectures: 2 layers, 512 wide (the library's default width for the
# encoders), the tokens of a short prompt.
# squeezebert and convbert run convolutions over the tokens (grouped 1x1 conv1d, F.unfold).
# t5's encoder adds a learned relative-position bias to its scores; falcon and gemma share
# one key/value head among all (multi-query attention).
LANGUAGE = ["qwen2", "mistral", "opt", "phi", "bloom", "deberta_v2", "squeezebert", "convbert",
            "t5_encoder", "falcon", "gemma"]  # fmt: skip
TOKENS = 77


def _language(name: str):
    tr = torch_libraries.transformers()
    decoder = {"num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8,
               "vocab_size": 1000}  # fmt: skip
    gqa = decoder | {"intermediate_size": 1376, "num_key_value_heads": 2}
    made = {
        "qwen2": lambda: tr.Qwen2Model(tr.Qwen2Config(**gqa)),
        "mistral": lambda: tr.MistralModel(tr.MistralConfig(**gqa)),
        "opt": lambda: tr.OPTModel(tr.OPTConfig(ffn_dim=2048, word_embed_proj_dim=512, **decoder)),
        "phi": lambda: tr.PhiModel(tr.PhiConfig(intermediate_size=2048, **decoder)),
        "bloom": lambda: tr.BloomModel(
            tr.BloomConfig(n_layer=2, hidden_size=512, n_head=8, vocab_size=1000)
        ),  # fmt: skip
        "deberta_v2": lambda: tr.DebertaV2Model(
            tr.DebertaV2Config(intermediate_size=2048, **decoder)
        ),
        "squeezebert": lambda: tr.SqueezeBertModel(
            tr.SqueezeBertConfig(intermediate_size=2048, embedding_size=512, **decoder)
        ),
        "convbert": lambda: tr.ConvBertModel(
            tr.ConvBertConfig(intermediate_size=2048, embedding_size=512, **decoder)
        ),
        "t5_encoder": lambda: tr.T5EncoderModel(
            tr.T5Config(d_model=512, d_kv=64, d_ff=2048, num_layers=2, num_heads=8, vocab_size=1000)
        ),  # fmt: skip
        "falcon": lambda: tr.FalconModel(
            tr.FalconConfig(
                num_hidden_layers=2, hidden_size=512, num_attention_heads=8, vocab_size=1000
            )
        ),  # fmt: skip
        "gemma": lambda: tr.GemmaModel(
            tr.GemmaConfig(intermediate_size=2048, num_key_value_heads=1, head_dim=64, **decoder)
        ),
    }[name]
    torch = torch_libraries.torch()

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = made()

        def forward(self, ids):
            return self.inner(input_ids=ids).last_hidden_state

    return LastHidden().eval(), (torch.randint(0, 1000, (1, TOKENS)),)


def build(name: str):
    """(torch module, example inputs) of ``name``, weights from ``torch.manual_seed(0)``."""
    torch = torch_libraries.torch()
    torch.manual_seed(0)
    if name in LANGUAGE:
        return _language(name)
    name, _, shape = name.partition("@")
    batch, size = map(int, shape.split("x")) if shape else (1, IMAGE_SIZE.get(name, 224))
    module = getattr(torch_libraries.torchvision().models, name)(weights=None).eval()
    return module, (torch.randn(batch, 3, size, size),)


def bench_one(name: str, args, cores: int, log, folder) -> dict:
    row = {"model": name}
    stage = "import"
    try:
        module, inputs = build(name)
        model = tvm_ext.from_torch(module, inputs, name=name)
        stage = "compile"
        started = time.perf_counter()
        compiled = tvm_ext.compile(model, host_target(num_cores=cores))
        row["compile s"] = time.perf_counter() - started
        fallback = compiled.applied.share_by_rule().get("fallback", 0.0)
        stage = "parity"
        calls, skipped = contenders(model, compiled, cores, False, folder)
        reference = model.reference()
        errors = {k: check_parity([as_numpy(c())], [reference], f"{name} {k}")[1]
                  for k, c in calls.items()}  # fmt: skip
    except Exception as err:  # a model that fails is this table's finding: say where
        log(f"{name}: failed at {stage}: {type(err).__name__}: {err}")
        return row | {
            "failed at": f"{stage}: {type(err).__name__}: {str(err).splitlines()[0][:80]}"
        }
    times = {k: [] for k in calls}
    for _ in range(args.rounds):
        for contender, call in calls.items():
            time.sleep(args.pause)
            with threadpool_limits(cores), tvm_api.threads(cores):
                times[contender].append(time_callable(call, args.min_ms / 1e3, args.repeat))
    med = {k: statistics.median(v) for k, v in times.items()}
    row.update({f"{k} ms": med[k] * 1e3 for k in ("ours", "torch eager", "onnxruntime")
                if k in med})  # fmt: skip
    row["ours vs onnxruntime"] = med["onnxruntime"] / med["ours"] if "onnxruntime" in med else None
    row["ours vs torch eager"] = med["torch eager"] / med["ours"]
    row["fallback FLOP share"] = fallback
    row["max rel error"] = max(errors.values())
    row["failed at"] = "; ".join(
        f"{k} skipped: {v}" for k, v in skipped.items() if k != "torch.compile"
    )
    log(f"{name}: " + "  ".join(f"{k} {v * 1e3:.3f} ms" for k, v in med.items()))
    return row


def main() -> None:
    cores = physical_cores()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(VISION + LANGUAGE))
    add_timing_args(parser, repeat=3, min_ms=100)
    args = parser.parse_args()
    target = host_target(num_cores=cores)

    def log(message: str) -> None:
        print(message, flush=True)

    log(f"CPU {cpu_name()}, LLVM mcpu={target_cpu(target)}, {cores} threads; BLAS: {blas_report()}")
    with tempfile.TemporaryDirectory() as folder:
        rows = [bench_one(name, args, cores, log, folder) for name in args.models.split(",")]
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    if args.no_readme:
        return
    command = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/unseen_models.py"
    extra = " ".join(shlex.quote(a) for a in sys.argv[1:])
    header = f"### Models outside the suite (`bench/unseen_models.py`)\n\n`{command} {extra}`"
    header = header.replace(" `", "`")
    header += (
        f"\n\nAt each library's defaults, seeded random weights, batch 1 (vision 224x224, "
        f"inception_v3 299x299, name@BxS: batch B of S x S images; language models {TOKENS} "
        f"tokens, 2 layers, 512 wide), {cores} threads "
        "for every contender "
        f"(`-mcpu={target_cpu(target)}`), parity against torch eager first. One timer: a "
        f"Python loop over a ready call, median of {args.repeat} samples of >= {args.min_ms} "
        f"ms, {args.rounds} interleaved rounds. BLAS: {blas_report()}. {args.note}"
    )
    write_section("unseen-models", header, table)


if __name__ == "__main__":
    main()
