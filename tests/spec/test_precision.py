"""The precision format table (attention_ports/spec/precision.py, issue 17): a format's constants
are the format's own, and a fixtures folder names its precision."""

from __future__ import annotations

import math

import numpy as np

from attention_ports.core import paths
from attention_ports.spec import precision

F32 = precision.FORMATS["float32"]


def test_the_float32_constants_are_the_formats_own() -> None:
    assert F32.u == np.finfo(np.float32).eps / 2
    assert F32.max_finite == float(np.finfo(np.float32).max)
    assert 88.7 < F32.exp_overflow < 88.8
    assert math.exp(-F32.negligible_logit) < 2.0**-150  # below half the smallest subnormal


def test_a_fixtures_folder_names_its_precision() -> None:
    assert precision.fixtures_dir("float64") == paths.FIXTURES
    assert precision.fixtures_dir("float32") == paths.FIXTURES / "precision" / "float32"
    assert precision.of_fixtures(precision.fixtures_dir("float32")) is F32
    assert precision.of_fixtures(paths.FIXTURES) is precision.FORMATS["float64"]
