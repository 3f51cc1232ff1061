# Causeway's top-level commands. Everything goes through the CMake presets in
# CMakePresets.json; each preset builds in build/<preset>/.
#
#   make run        install deps, build release, run `causeway demo`
#   make test       install deps, build + test release, then build + test
#                   the whole suite again under ThreadSanitizer
#   make build      build release
#   make quick      build release, run its tests except those labelled `stress`
#   make debug      build the debug preset
#   make tsan       build + test under ThreadSanitizer
#   make asan       build + test under AddressSanitizer + UBSan
#   make clang-tsa  build with clang -Wthread-safety (checks the lock annotations)
#   make clean      remove build/
#
# JOBS (default 2) sets build and test parallelism; CTEST_ARGS is passed to
# every ctest run, e.g. `make quick CTEST_ARGS="-R future"`.

JOBS ?= 2
CTEST_ARGS ?=
CMAKE ?= cmake
CTEST ?= ctest

# Steps run in order; the parallelism lives inside ninja and ctest.
.NOTPARALLEL:
.DEFAULT_GOAL := build
.PHONY: deps build run test quick debug tsan asan clang-tsa clean

deps:
	@./scripts/install-deps.sh

# Configures a preset's build tree the first time (and when the presets
# change); afterwards ninja re-runs CMake itself when a CMakeLists.txt changes.
build/%/build.ninja: CMakePresets.json
	$(CMAKE) --preset $*

build_preset = $(CMAKE) --build --preset $(1) -j $(JOBS)
test_preset = $(CTEST) --preset $(1) -j $(JOBS) --output-on-failure $(CTEST_ARGS)

build: deps build/release/build.ninja
	$(call build_preset,release)

run: build
	build/release/bin/causeway demo

test: deps build/release/build.ninja build/tsan/build.ninja
	$(call build_preset,release)
	$(call test_preset,release)
	$(call build_preset,tsan)
	$(call test_preset,tsan)

quick: build
	$(call test_preset,quick)

debug: deps build/debug/build.ninja
	$(call build_preset,debug)

tsan: deps build/tsan/build.ninja
	$(call build_preset,tsan)
	$(call test_preset,tsan)

asan: deps build/asan/build.ninja
	$(call build_preset,asan)
	$(call test_preset,asan)

clang-tsa: deps build/clang-tsa/build.ninja
	$(call build_preset,clang-tsa)

clean:
	rm -rf build
