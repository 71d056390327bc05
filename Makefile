# edgesmith: two commands do all set-up themselves.
#   make demo   - create .venv, install, train the digits demo if needed, build it for `host`
#   make test   - create/update .venv, run the whole suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0

# Debian packages the tests use: a C compiler, sshd for the SSH bench tests, cross
# compilers + qemu for the C runtime's aarch64/Cortex-M builds, valgrind.
APT_PACKAGES := gcc make openssh-server openssh-client gcc-aarch64-linux-gnu \
	libc6-dev-arm64-cross qemu-user gcc-arm-none-eabi libnewlib-arm-none-eabi \
	binutils-arm-none-eabi qemu-system-arm valgrind
APT_BINARIES := gcc make sshd ssh-keygen aarch64-linux-gnu-gcc qemu-aarch64 \
	arm-none-eabi-gcc arm-none-eabi-size qemu-system-arm valgrind

.PHONY: setup system-deps demo test test-all lint bench zoo clean

setup: system-deps $(STAMP)

# Install only what is missing; needs root (or sudo), as on the CI machine.
system-deps:
	@missing=""; for b in $(APT_BINARIES); do \
		command -v $$b >/dev/null 2>&1 || [ -x /usr/sbin/$$b ] || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages (missing:$$missing)"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			$(APT_PACKAGES) >/dev/null; \
	fi

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# torch first: the CPU wheel cached on the machine; a bare `torch` would pull a CUDA build.
$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[all,test]' $(TORCH)
	touch $(STAMP)

examples/digits/digits.pt: | $(STAMP)
	$(PY) examples/digits/train.py $@

demo: setup examples/digits/digits.pt
	$(VENV)/bin/edgesmith build examples/digits/digits.pt --arch examples/digits/model.py:build \
		--data digits --profile host --out build/demo

# The suite runs on one pytest-xdist worker per core, at most 4 (TEST_WORKERS=0: serially,
# in one process). --dist loadfile keeps each file on one worker, so module fixtures are
# built once; session fixtures are built once per worker. --durations: CI's log names the
# slowest tests, so the 25-minute aim can be kept with data.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
XDIST = -n $(TEST_WORKERS) --dist loadfile

test: setup
	$(VENV)/bin/pytest -m "not very_slow" $(XDIST) --durations=25 $(PYTEST_ARGS)

test-all: setup
	$(VENV)/bin/pytest $(XDIST) $(PYTEST_ARGS)

# side-by-side benchmarks against peer runtimes; each prints JSON (not part of make test)
bench: setup examples/digits/digits.pt
	$(PIP) install -q -e '.[all,bench]' $(TORCH)
	$(PY) benchmarks/compress_digits.py
	$(PY) benchmarks/convert_digits.py
	$(PY) benchmarks/c_runtime.py
	$(PY) benchmarks/ssh_overhead.py

# train the zoo models (examples/zoo) whose checkpoints are missing from
# $XDG_CACHE_HOME/edgesmith/zoo, at their smallest input size; keeps those that exist
zoo: setup
	$(PY) examples/zoo/train.py --missing

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf build .pytest_cache .ruff_cache
