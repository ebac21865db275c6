"""The custom Julia system image (attention_ports/runtimes/julia/sysimage.py, scripts/build_julia_sysimage.py).

What must hold: an image is used only when its runtime key matches (this worker.jl, this julia,
this CPU), ``ATTENTION_PORTS_JULIA_SYSIMAGE=stock`` turns it off, and a worker on the image gives
byte-identical results to one on the stock image on cases too small for a vectorised sum to add
in another order (the image's methods are compiled at -O2, a stock worker's at -O1: on the widest
cases the last bits may differ, within every bound; docs/performance.md), for our port (served
from the image's compiled copy) and for a port the image has never seen, including errors. The
tests with a real image need ``make setup`` to have built one: they skip without it, and fail
under CI=true (CI's set-up builds it; its absence there is a bug).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attention_ports.core import paths
from attention_ports.fixtures.store import iter_entries, load_case
from attention_ports.runtimes.impl import ImplementationError, ImplementationUnavailable
from attention_ports.runtimes.julia import sysimage as jsi
from attention_ports.runtimes.julia.adapter import JuliaImplementation, find_julia

ROOT = Path(__file__).resolve().parents[3]


def _julia() -> str:
    try:
        return find_julia()
    except ImplementationUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"julia is required in CI: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def image() -> jsi.Image:
    julia = _julia()
    found = jsi.find(julia)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no Julia system image: CI's `make setup` builds one (scripts/build_julia_sysimage.py)")
        pytest.skip("no Julia system image built here (make setup builds one)")
    return found


def test_stock_mode_turns_the_image_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jsi.ENV, "stock")
    assert jsi.find("/any/julia") is None
    monkeypatch.setenv(jsi.ENV, "fastest")
    with pytest.raises(ValueError, match="ATTENTION_PORTS_JULIA_SYSIMAGE='fastest'"):
        jsi.find("/any/julia")


def _fake_image(root: Path, julia: jsi.Julia, runtime_key: str) -> None:
    folder = root / "abc"
    folder.mkdir(parents=True)
    (folder / jsi.IMAGE).write_bytes(b"not really an image")
    meta = {
        "format": jsi.FORMAT,
        "runtime_key": runtime_key,
        "julia": {"command": julia.command, "stock_image": julia.stock_image, "version": julia.version},
        "built": "2026-01-01T00:00:00+00:00",
    }
    (folder / jsi.META).write_text(json.dumps(meta))


def test_an_image_is_used_only_while_its_runtime_key_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jsi.ENV, raising=False)
    cache, julia_bin, stock = tmp_path / "cache", tmp_path / "julia", tmp_path / "sys.so"
    julia_bin.write_text("#!/bin/sh\n")
    stock.write_bytes(b"stock")
    worker, original = tmp_path / "worker.jl", jsi.WORKER.read_bytes()
    worker.write_bytes(original)
    monkeypatch.setattr(jsi, "directory", lambda: cache)
    monkeypatch.setattr(jsi, "WORKER", worker)
    jl = jsi.Julia(str(julia_bin), str(stock), "1.5.3")
    _fake_image(cache, jl, jsi.runtime_key(jl))
    assert jsi.find(str(julia_bin)) is not None
    assert jsi.find(str(tmp_path / "another-julia")) is None  # built by another julia command

    worker.write_bytes(worker.read_bytes() + b"\n# edited\n")  # the image's worker module is stale
    assert jsi.find(str(julia_bin)) is None
    worker.write_bytes(original)
    assert jsi.find(str(julia_bin)) is not None

    stock.write_bytes(b"a reinstalled julia")  # another stock image: the image was built from the old one
    assert jsi.find(str(julia_bin)) is None


def test_the_build_key_follows_our_port_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    shutil.copytree(jsi.PORT_SOURCES, src)
    monkeypatch.setattr(jsi, "PORT_SOURCES", src)
    jl = jsi.Julia("/no/julia", "/no/sys.so", "1.5.3")
    before = jsi.build_key(jl, {})
    assert jsi.build_key(jl, {}) == before
    (src / "attention.jl").write_text((src / "attention.jl").read_text() + "\n# edited\n")
    assert jsi.build_key(jl, {}) != before
    assert jsi.runtime_key(jl) == jsi.runtime_key(jl)  # the runtime key does not depend on the port


def _catalogue(ids: tuple[str, ...]):
    entries = [e for e in iter_entries(paths.FIXTURES) if e["id"] in ids]
    assert len(entries) == len(ids)
    return [load_case(paths.FIXTURES, e) for e in entries]


CASES = ("seed001_mha_5tok_d16_h4", "self_attn_causal", "clf_step_sentence12_n25", "seed002_masked_softmax")


def _outputs(impl: JuliaImplementation) -> list[dict[str, np.ndarray]]:
    return [impl.run(c.op, c.inputs, c.options) for c in _catalogue(CASES)]


def test_our_port_on_the_image_matches_the_stock_image_bit_for_bit(image: jsi.Image) -> None:
    with JuliaImplementation(sysimage="stock") as stock, JuliaImplementation() as custom:
        expected, got = _outputs(stock), _outputs(custom)
        assert "stock system image" in stock.describe()
        assert str(image.path) in custom.describe()
    for e, g in zip(expected, got, strict=True):
        assert e.keys() == g.keys()
        for name in e:
            np.testing.assert_array_equal(g[name], e[name], strict=True)


def test_a_port_the_image_never_saw_runs_on_it_and_raises_the_same(image: jsi.Image, tmp_path: Path) -> None:
    port = tmp_path / "scaled.jl"  # our attention port with a deliberate bug, under another name
    port.write_text((jsi.PORT_SOURCES / "attention.jl").read_text().replace("v * weights", "2 .* (v * weights)"))
    case = _catalogue(("seed002_decoder_shape",))[0]
    bad = dict(case.inputs, k=np.ones((3, 5)))
    results, errors = [], []
    for mode in ("stock", "auto"):
        with JuliaImplementation(port, sysimage=mode) as impl:
            results.append(impl.run(case.op, case.inputs, case.options))
            with pytest.raises(ImplementationError) as info:
                impl.run(case.op, bad, case.options)
            errors.append(str(info.value))
    np.testing.assert_array_equal(results[1]["output"], results[0]["output"], strict=True)
    with JuliaImplementation(sysimage="stock") as ours:
        right = ours.run(case.op, case.inputs, case.options)["output"]
    np.testing.assert_allclose(results[1]["output"], 2 * right, rtol=1e-15)  # the file ran, not the image's port
    assert errors[0] == errors[1]
    assert "q and k need the same d_k" in errors[1]


def _runner(julia: str, image: jsi.Image, runner: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [julia, "--startup-file=no", "-O1", "-J", str(image.path), str(runner), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)


def test_the_image_holds_this_checkouts_native_runner_and_an_edited_copy_runs_its_own_code(
    image: jsi.Image, tmp_path: Path
) -> None:
    # The test suite's native runs (tests/test_native_runners.py) start on the image: its compiled
    # copy of ports/julia/conformance.jl is used only while it was built from this very file (else
    # every native run compiles the runner, ~4 s, and nothing says so).
    julia = _julia()
    probe = "println(Main.AttentionPortsConformance.built_from(ARGS[1]))"
    said = subprocess.run(
        [julia, "--startup-file=no", "-J", str(image.path), "-e", probe, str(jsi.RUNNER)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert said.stdout.strip() == "true", said.stdout + said.stderr
    # A copy edited elsewhere (as an unpacked wheel's runner, or a user's own edit) runs its own code.
    copy = tmp_path / "conformance.jl"
    copy.write_text(jsi.RUNNER.read_text().replace('"julia conformance: %d passed', '"edited conformance: %d passed'))
    shutil.copy(jsi.WORKER, tmp_path / "worker.jl")
    fixtures = ["--fixtures", str(paths.FIXTURES), "--case", "softmax_ties"]
    edited = _runner(julia, image, copy, *fixtures, str(jsi.PORT_SOURCES))
    assert edited.returncode == 0 and "edited conformance: 1 passed, 0 failed, 0 missing" in edited.stdout, (
        edited.stdout + edited.stderr
    )
    ours = _runner(julia, image, jsi.RUNNER, *fixtures, str(jsi.PORT_SOURCES))
    assert ours.returncode == 0 and "julia conformance: 1 passed, 0 failed, 0 missing" in ours.stdout
