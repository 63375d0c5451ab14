"""What the README claims of the rules, checked against the code: which rule takes each kernel
of the zoo, by FLOPs (the sentence under "Latest" in the models section). The figures are read
from the README itself, so the text cannot drift from what the rules do."""

from __future__ import annotations

import pathlib
import re

import pytest

from tvm_ext import schedules as S
from tvm_ext.model_pipeline.compile import ModelSource, bind_and_lower
from tvm_ext.workloads import models

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
CLAIM = re.compile(
    r"`contraction` takes (?P<mlp>[\d.]+) % of the MLP and ResNet, (?P<encoder>[\d.]+) % of the"
    r" encoder\s+\(`rows` the rest\) and (?P<decoder>[\d.]+) % of the decoder \(`staged` "
    r"attention (?P<staged>[\d.]+) %"
)


@pytest.fixture(scope="module")
def claimed() -> dict[str, float]:
    text = " ".join(README.read_text().split())
    match = CLAIM.search(text)
    assert match, "the README's coverage sentence changed: update this test with it"
    return {k: float(v) for k, v in match.groupdict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(models.ZOO))
def test_the_zoo_coverage_the_readme_states(name, claimed, host):
    model = models.build(name)
    shares = S.apply(bind_and_lower(ModelSource.of(model, None, None, None), host), host)
    by_rule = {rule: 100 * share for rule, share in shares.share_by_rule().items()}
    assert not by_rule.get("fallback"), by_rule  # "none by the fallback"
    expected = {"mlp": claimed["mlp"], "resnet": claimed["mlp"], "encoder": claimed["encoder"],
                "decoder": claimed["decoder"]}[name]  # fmt: skip
    assert round(by_rule["contraction"], 2) == expected, by_rule
    if name == "encoder":  # "`rows` the rest" (element-wise kernels carry no FLOPs)
        assert {rule for rule, share in by_rule.items() if share} == {"contraction", "rows"}
    if name == "decoder":
        assert round(by_rule["staged"], 2) == claimed["staged"], by_rule
