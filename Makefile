# The two commands (README): `make run` and `make test`. Both create .venv/ on first use.
.PHONY: run test lint bench setup
ARGS ?=

# the install's seconds are said when it did something (a fresh clone: CI's log shows them)
setup:
	@t0=$$(date +%s); ./scripts/setup.sh; s=$$(( $$(date +%s) - t0 )); [ $$s -lt 5 ] || echo "setup: $$s s"

run: setup
	.venv/bin/gemma-workbench $(ARGS)

# the suite runs on every core (at most 4 workers: each holds JAX and, for some files, the 270M);
# a test file stays on one worker, so its module fixtures (a trained run, an engine) are built once
test: setup
	.venv/bin/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile --durations=30 $(ARGS)

lint: setup
	.venv/bin/ruff check adapters_lib workbench themes tests bench

bench: setup
	.venv/bin/python -m bench $(ARGS)
