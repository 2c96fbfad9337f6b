# The two commands (README): `make run` and `make test`. Both create .venv/ on first use.
.PHONY: run test lint bench setup
ARGS ?=

setup:
	./scripts/setup.sh

run: setup
	.venv/bin/gemma-workbench $(ARGS)

test: setup
	.venv/bin/python -m pytest -q $(ARGS)

lint: setup
	.venv/bin/ruff check adapters_lib workbench themes tests bench

bench: setup
	.venv/bin/python -m bench $(ARGS)
