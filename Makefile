# Tessera quick start: `make demo` and `make test` install what is missing, build, then run.
# Other targets: build, test-fast (no sanitizers), test-sanitize, bench, clean, format, format-check,
# install (PREFIX=/usr/local).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TESSERA := $(BUILD)/tessera

.PHONY: all deps build demo test test-fast test-sanitize bench clean format format-check install
all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo.sh $(TESSERA)

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

# The comm library and its multi-process tests again under ASan+UBSan and under TSan.
test-sanitize: deps
	@scripts/test-sanitize.sh

# clang-format is checked, never applied, by `make test` (scripts/check-format.sh; baseline in
# scripts/format-baseline.txt).
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
