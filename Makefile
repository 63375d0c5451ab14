# The README's two commands: `make lab` (main job on the host CPU) and `make test`.
# Each creates the virtual environment on first use, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: lab test info clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

lab: $(STAMP)
	$(VENV)/bin/tvm-ext lab

info: $(STAMP)
	$(VENV)/bin/tvm-ext info

test: $(STAMP)
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
