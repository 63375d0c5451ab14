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
CLAIM = re.compile(r"FLOPs by rule: (?P<rules>.*?)\.(?:\s|$)")
MODEL = re.compile(r"(\w+): ((?:`\w+` [\d.]+ %(?:, )?)+)")
SHARE = re.compile(r"`(\w+)` ([\d.]+) %")


@pytest.fixture(scope="module")
def claimed() -> dict[str, dict[str, float]]:
    """{model: {rule: % of its FLOPs}} as the README states them (``bench/models.py`` writes
    the sentence)."""
    text = " ".join(README.read_text().split())
    match = CLAIM.search(text)
    assert match, "the README's zoo paragraph has no 'FLOPs by rule' (run bench/models.py)"
    return {
        model: {rule: float(v) for rule, v in SHARE.findall(parts)}
        for model, parts in MODEL.findall(match["rules"])
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", list(models.ZOO))
def test_the_zoo_coverage_the_readme_states(name, claimed, host):
    model = models.build(name)
    shares = S.apply(bind_and_lower(ModelSource.of(model, None, None, None), host), host)
    by_rule = {rule: round(100 * share, 2) for rule, share in shares.share_by_rule().items()}
    assert {rule: v for rule, v in by_rule.items() if v > 0} == claimed[name], by_rule
    if "fallback" not in claimed[name]:  # "none by the fallback"
        assert not by_rule.get("fallback"), by_rule
