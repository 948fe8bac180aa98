# Tessera quick start: `make demo` and `make test` install what is missing, build, then run.
# `make demo` installs and builds only what the demo runs (the CLI and the example trainer); `make test`
# installs the rest (test tools, PyTorch in .venv) and builds every target.
# Other targets: build, test-fast (no sanitizers), test-sanitize, bench, clean, format, format-check,
# install (PREFIX=/usr/local).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TESSERA := $(BUILD)/tessera

DEMO_TARGETS := tessera_cli tessera_example_trainer

.PHONY: all deps deps-demo build build-demo demo test test-fast test-sanitize bench clean format format-check install
all: build

deps:
	@scripts/install-deps.sh

deps-demo:
	@scripts/install-deps.sh --demo

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

# Configured again after deps: a tree first configured by `make demo` then finds the test tools.
build: deps $(BUILD)/build.ninja
	cmake -S . -B $(BUILD) > /dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-demo: deps-demo $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target $(DEMO_TARGETS)

demo: build-demo
	@scripts/demo.sh $(TESSERA)

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

# The comm library and its multi-process tests again under ASan+UBSan and under TSan; the fuzz tests
# (tests/fuzz) again under ASan+UBSan.
test-sanitize: deps
	@scripts/test-sanitize.sh

# clang-format is checked, never applied, by `make test` (scripts/check-format.sh, every tracked file).
format-check: deps
	@scripts/check-format.sh

test: format-check test-fast test-sanitize

bench: build
	@scripts/bench-comm.sh

clean:
	rm -rf $(BUILD) build-asan build-tsan

format:
	clang-format -i $$(git ls-files '*.c' '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')

# libtessera, its headers, CMake package and pkg-config file, and the binary (docs/architecture.md).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)
