# Causeway's top-level commands. Everything goes through the CMake presets in
# CMakePresets.json; each preset builds in build/<preset>/.
#
#   make run        install deps, build release, run `causeway demo`
#   make test       install deps, build + test release, then build + test
#                   the whole suite again under ThreadSanitizer, then under
#                   AddressSanitizer + UBSan (clang) with the fuzz targets
#   make build      build release
#   make quick      build release, run its tests except those labelled `stress`
#   make soak       build release, run the 10-minute distributed soak (label
#                   `soak`, which no other target runs)
#   make debug      build the debug preset
#   make tsan       build + test under ThreadSanitizer
#   make asan       build + test under AddressSanitizer + UBSan (clang), and
#                   run each fuzz target for CAUSEWAY_FUZZ_SECONDS
#   make clang-tsa  build with clang -Wthread-safety (checks the lock annotations)
#   make install    build release, install it under PREFIX (default
#                   /usr/local): libraries, headers, `causeway`, CMake package
#   make clean      remove build/
#
# JOBS (default 2) sets build and test parallelism; CTEST_ARGS is passed to
# every ctest run, e.g. `make quick CTEST_ARGS="-R future"`.

JOBS ?= 2
PREFIX ?= /usr/local
CTEST_ARGS ?=
CMAKE ?= cmake
CTEST ?= ctest

# ccache (CMakeLists.txt uses it when installed): paths relative to the tree
# and no working directory in the hash, so a clone in another folder (CI's)
# reuses the objects of this one instead of compiling everything again.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= true
export CCACHE_MAXSIZE ?= 20G

# Steps run in order; the parallelism lives inside ninja and ctest.
.NOTPARALLEL:
.DEFAULT_GOAL := build
.PHONY: deps build run test quick soak debug tsan asan clang-tsa install clean

deps:
	@./scripts/install-deps.sh

# Configures a preset's build tree the first time (and when the presets
# change); afterwards ninja re-runs CMake itself when a CMakeLists.txt changes.
build/%/build.ninja: CMakePresets.json
	$(CMAKE) --preset $*

build_preset = $(CMAKE) --build --preset $(1) -j $(JOBS)
# Tests labelled `soak` (long runs with their own target) are left out.
test_preset = $(CTEST) --preset $(1) -j $(JOBS) --output-on-failure -LE '$(or $(2),soak)' $(CTEST_ARGS)

build: deps build/release/build.ninja
	$(call build_preset,release)

run: build
	build/release/bin/causeway demo

test: deps build/release/build.ninja build/tsan/build.ninja build/asan/build.ninja
	$(call build_preset,release)
	$(call test_preset,release)
	$(call build_preset,tsan)
	$(call test_preset,tsan)
	$(call build_preset,asan)
	$(call test_preset,asan)

install: build
	$(CMAKE) --install build/release --prefix $(PREFIX)

quick: build
	$(call test_preset,quick,stress|soak)

# The distributed soak: CAUSEWAY_SOAK_SECONDS (default 600) of clients and
# refused probes against a process cluster, RSS slope per process reported.
soak: build
	$(CTEST) --preset release --output-on-failure -L soak -V $(CTEST_ARGS)

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
