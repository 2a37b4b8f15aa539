# The README's commands. `make demo` installs dependencies, configures, builds the programs
# the quickstart needs and runs it (docs/quickstart.md); `make test` installs dependencies,
# configures, builds and runs every test. Variables: BUILD_DIR, BUILD_TYPE, JOBS, CMAKE_ARGS;
# for the demo also ALGO (a preset of configs/algorithms/, default grpo), ARGS (options
# for grpo-run, e.g. ARGS="--set train.steps=80"), LORA=1 (GRPO trains LoRA adapters:
# configs/quickstart-lora.yaml, docs/lora.md), PYTHON_REWARD=1 (the math reward as a Python
# function: configs/quickstart-python-reward.yaml, docs/python-rewards.md) and TASK=tools (the
# tool demo: the policy learns to call a calculator, configs/quickstart-tools.yaml, docs/tools.md).
# The CUDA build and the GPU check: gpu-build, gpu-bundle, gpu-check (below, docs/gpu.md).
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps runtime-deps configure configure-only build test demo bench fuzz clean gpu-build gpu-bundle gpu-check

all: build

# Everything: packages, and the references the tests compare against (.venv/, .cache/).
deps:
	./scripts/install-deps.sh

# The packages only: the demo needs no test references.
runtime-deps:
	./scripts/install-deps.sh --no-references

configure: deps
	$(MAKE) configure-only

configure-only:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

ALGO ?= grpo
ARGS ?=
LORA ?=
PYTHON_REWARD ?=
TASK ?=
demo: runtime-deps
	$(MAKE) configure-only
	cmake --build $(BUILD_DIR) -j $(JOBS) --target demo-programs
	TASK=$(TASK) LORA=$(LORA) PYTHON_REWARD=$(PYTHON_REWARD) ./scripts/demo.sh $(BUILD_DIR) $(ALGO) $(ARGS)

# Benchmarks (not part of `make test`): each prints `name: value` headline lines.
bench: build
	./scripts/run-benchmarks.sh $(BUILD_DIR)

# libFuzzer job: builds bench/fuzz with clang and runs every target FUZZ_SECONDS each.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz:
	./scripts/install-deps.sh --fuzz --no-references
	cmake -S bench/fuzz -B $(FUZZ_DIR) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_DIR) -j $(JOBS)
	./scripts/run-fuzzers.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

# The CUDA configuration (docs/gpu.md), on any machine with the CUDA toolkit, GPU or not:
# gpu-build builds it against the CUDA LibTorch of .venv/ (PyPI's torch); gpu-bundle packs what
# the GPU check runs into GPU_BUILD_DIR/grpo-gpu-bundle.tar.xz; gpu-check runs the check from it
# (on a GPU machine; DRY_RUN=1 runs every step on the CPU here).
GPU_BUILD_DIR ?= build-gpu
DRY_RUN ?=
gpu-build: deps
	./scripts/gpu-build.sh $(GPU_BUILD_DIR)

gpu-bundle: gpu-build
	./scripts/gpu-bundle.sh $(GPU_BUILD_DIR)

gpu-check:
	./scripts/gpu-check.sh --bundle $(GPU_BUILD_DIR)/grpo-gpu-bundle.tar.xz $(if $(DRY_RUN),--dry-run)

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_DIR) $(GPU_BUILD_DIR)
