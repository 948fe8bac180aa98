# Tessera quick start: `make demo` and `make test` install what is missing, build, then run.
# Other targets: build, test-fast (no sanitizers), test-sanitize, bench, clean, format.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TESSERA := $(BUILD)/tessera

.PHONY: all deps build demo test test-fast test-sanitize bench clean format
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

test: test-fast test-sanitize

bench: build
	@scripts/bench-comm.sh

clean:
	rm -rf $(BUILD) build-asan build-tsan

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
