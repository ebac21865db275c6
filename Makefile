# The two README commands: `make verify` (the main job) and `make test` (the test suite).
# Each runs an idempotent set-up first, so each works on a fresh machine by itself: `verify` only
# what verify needs (scripts/setup_verify.sh: the venv with the package, torch, R with rpy2,
# Julia), `test` and the other targets everything (scripts/setup.sh: that, then the dev tools,
# Chromium and the Julia system image, which only the tests need).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup setup-verify verify test native-tests lint fixtures check-fixtures bench wheel

setup:
	@bash scripts/setup.sh

setup-verify:
	@bash scripts/setup_verify.sh

verify: setup-verify
	$(VENV)/bin/attention-ports verify

# pytest-xdist: one worker per core (each with its own R and Julia workers); --dist loadgroup keeps
# an implementation's fixture cases, the tests sharing the installed wheel, and each module sharing a
# costly module fixture (tests/conftest.py, SHARED_MODULE_FIXTURES), on one worker each.
PYTEST_JOBS ?= auto

test: setup
	$(PY) -m pytest -n $(PYTEST_JOBS) --dist loadgroup
	@bash scripts/native_tests.sh
	$(VENV)/bin/ruff check .

native-tests: setup
	@bash scripts/native_tests.sh

lint: setup
	$(VENV)/bin/ruff check .

fixtures: setup
	$(VENV)/bin/attention-ports generate

check-fixtures: setup
	$(VENV)/bin/attention-ports check-fixtures

bench: setup
	$(VENV)/bin/attention-ports bench

# The installable tool: dist/attention_ports-<version>-py3-none-any.whl, carrying the fixtures, the
# contract, the R and Julia ports and the installers (tests/test_packaging.py installs and runs it).
# Pure Python: it needs only a venv with pip (made here if missing), not `make setup`'s torch, R,
# Julia or Julia image. PIP_WHEEL_FLAGS: e.g. --no-build-isolation to build offline with the venv's
# own setuptools (tests/test_make_wheel.py does).
PIP_WHEEL_FLAGS ?=
wheel: | $(PY)
	rm -rf build  # setuptools reuses build/lib: a file deleted from the tree would stay in the wheel
	$(PY) -m pip wheel --no-deps --disable-pip-version-check -q $(PIP_WHEEL_FLAGS) -w dist .
	@ls -l dist/attention_ports-*.whl

$(PY):
	$(or $(PYTHON),python3) -m venv $(VENV)
