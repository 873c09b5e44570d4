# tf_ops: every target does its own set-up from a fresh clone, idempotently.
#   make build   .venv with the pinned TensorFlow + tools, then the op library; .venv can then
#                `import tf_ops` from any folder (this source tree, on its path)
#   make test    build, the engine's sanitizer test, then the pytest suite
#   make test-quick  build, then one case in 10 of each quick test on both cores, without
#                the `heavy` ones (builds, fresh processes: pytest.ini): the developer loop,
#                a few minutes; CI runs everything.
#                FAMILY=norm (or norm,softmax) runs one op family's tests only
#   make engine-test  the CPU engine under ASan + UBSan (TF-free, tests/engine/)
#   make gpu-selftest-cpu  the CUDA kernels' self-test on the CPU, plain and
#                under ASan + UBSan and TSan (no GPU, no nvcc; tools/gpu_selftest_cpu.sh)
#   make demo    build, then tf_ops.patch_keras() on a keras.applications model: the
#                interleaved speed-up of its train step, and its TFLite export
#   make bench   build, then the benchmark suite (BENCH_ARGS="--quick" for ~1 min)
#   make bench-models  build, then the model benchmark, stock Keras vs patch_keras()
#                (BENCH_ARGS="--models ResNet50 --quick"; python -m tf_ops.bench.models -h)
#   make wheel   a wheel in dist/, built against .venv's TensorFlow (and requiring exactly it)
#   make compat TF=2.20  the whole suite against another TensorFlow (TF_DIST=tensorflow-cpu
#                for that distribution), in a copy of the sources with a venv of its own
#   make bazel-build  the CPU library with Bazel, in build-bazel/ (see README)
# TF_OPS_CUDA=AUTO|ON|OFF chooses the CUDA kernels (AUTO: when nvcc is found),
# TF_OPS_XLA=AUTO|ON|OFF the XLA lowerings (AUTO: when TF has the headers).

PYTHON ?= python3
# The TensorFlow the venv gets and the library is compiled against: a minor version and a
# distribution (tensorflow or tensorflow-cpu). The .so binds to TF internals with no stable ABI.
TF ?= 2.21
TF_DIST ?= tensorflow
VENV ?= .venv
PY := $(VENV)/bin/python
TF_OPS_CUDA ?= AUTO
TF_OPS_XLA ?= AUTO
BUILD_DIR ?= build
# A compiler cache where one is installed (.ci/run installs Debian's ccache): every CMake
# configure of the project, those of the tests, the wheel and `make compat` too, takes its
# launchers from these variables, so a rebuild of unchanged sources costs seconds.
CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
export CMAKE_CXX_COMPILER_LAUNCHER ?= $(CCACHE)
export CMAKE_CUDA_COMPILER_LAUNCHER ?= $(CCACHE)
# Paths under the tree are hashed relative to it, so another clone or worktree of the same
# sources hits the same cache entries.
export CCACHE_BASEDIR ?= $(CURDIR)
# Builds with debug info (the sanitizer programs: -g1) would otherwise hash the build
# folder too, so another clone (CI's) missed every one of them; the line tables name the
# sources relative to it either way.
export CCACHE_NOHASHDIR ?= true
# The libraries precompile TensorFlow's headers (CMakeLists.txt, TF_OPS_PCH): ccache caches
# a compile that uses a precompiled header only with these.
export CCACHE_SLOPPINESS ?= pch_defines,time_macros,include_file_mtime,include_file_ctime
# ccache hashes the compiler's name: CMake's Makefile builds find c++, pip's Ninja builds
# (the wheel, the install tests) g++, the same compiler, so name it once for all of them
# (unless CXX is the user's own).
ifeq ($(origin CXX),default)
export CXX := c++
endif
endif
# TensorFlow turns its oneDNN kernels and allocator on by the CPU's kind (AVX-512 VNNI or
# BF16, AMX) and off elsewhere (an AMD EPYC without AVX-512): on for every kind, so that the
# tests, demo and benchmarks run the same TensorFlow everywhere (NCHW convolutions on the
# CPU, allocator statistics for the peak-memory columns, the same matmul rounding).
export TF_ENABLE_ONEDNN_OPTS ?= 1
ENGINE_TEST_DIR ?= build-engine-test
# ENGINE_TEST=0: `make test` without the engine's sanitizer test (CI's older-TensorFlow step:
# the engine is TF-free and step 1 runs it).
ENGINE_TEST ?= 1
WHEEL_BUILD_DIR ?= $(BUILD_DIR)-wheel
# TensorFlow and the requirements file's checksum name the stamp, so changing either reinstalls.
REQ_STAMP := $(VENV)/.installed-$(TF_DIST)-$(TF)-$(shell cat requirements-dev.txt requirements-keras-hub.txt | cksum | cut -d' ' -f1)
TF_DISTRIBUTIONS := tensorflow tensorflow-cpu

.PHONY: venv build engine-test test test-quick demo bench bench-models wheel compat \
  gpu-selftest gpu-selftest-cpu bazel-build clean

venv: $(REQ_STAMP)

# The other TensorFlow distribution is removed first: both install the same files.
# tools/pip_install.sh retries a download that is cut off.
$(REQ_STAMP): requirements-dev.txt requirements-keras-hub.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	tools/pip_install.sh $(PY) --quiet --upgrade pip
	$(PY) -m pip uninstall --quiet --yes $(filter-out $(TF_DIST),$(TF_DISTRIBUTIONS))
	tools/pip_install.sh $(PY) --quiet "$(TF_DIST)==$(TF).*" -r requirements-dev.txt
	tools/pip_install.sh $(PY) --quiet --no-deps -r requirements-keras-hub.txt
	rm -f $(VENV)/.installed-* && touch $@

# The last step is the development install: a .pth file in the venv's site-packages puts this
# tree on sys.path (after site-packages), so the package and the library built here import from
# any folder without a second build. Rewritten only when it changes.
build: venv
	cmake -S . -B $(BUILD_DIR) -DPython3_EXECUTABLE=$(abspath $(PY)) \
	  -DTF_OPS_CUDA=$(TF_OPS_CUDA) -DTF_OPS_XLA=$(TF_OPS_XLA) \
	  > $(BUILD_DIR).configure.log 2>&1 \
	  || (cat $(BUILD_DIR).configure.log; exit 1)
	grep -E "tf_ops:" $(BUILD_DIR).configure.log
	cmake --build $(BUILD_DIR) --parallel 2
	$(PY) -c 'import pathlib, sys, sysconfig; \
	  pth = pathlib.Path(sysconfig.get_path("purelib"), "tf_ops_source_tree.pth"); \
	  line = sys.argv[1] + "\n"; \
	  pth.exists() and pth.read_text() == line or pth.write_text(line)' $(CURDIR)

# The CPU engines and their math, TF-free, built with AddressSanitizer and
# UndefinedBehaviorSanitizer (Eigen for half/bfloat16 comes from the TF wheel): every
# program tests/engine/CMakeLists.txt names (tf_ops_engine_test), run by ctest.
engine-test: venv
	mkdir -p $(ENGINE_TEST_DIR)
	cmake -S tests/engine -B $(ENGINE_TEST_DIR) -DPython3_EXECUTABLE=$(abspath $(PY)) \
	  > $(ENGINE_TEST_DIR)/configure.log 2>&1 \
	  || (cat $(ENGINE_TEST_DIR)/configure.log; exit 1)
	cmake --build $(ENGINE_TEST_DIR) --parallel 2
	cd $(ENGINE_TEST_DIR) && ctest --output-on-failure --timeout 1800

# FAMILY=norm: one op family's tests, tests/norm/ (tests/conftest.py's family_of; --family).
FAMILY ?=
FAMILY_ARGS = $(if $(FAMILY),--family=$(FAMILY))
test: build $(if $(filter 0,$(ENGINE_TEST)),,engine-test)
	$(PY) -m pytest $(FAMILY_ARGS) $(PYTEST_ARGS)

QUICK_SLICE ?= 10
test-quick: build
	$(PY) -m pytest -m "not slow and not heavy" --slice=$(QUICK_SLICE) -n 2 --dist loadfile -q $(FAMILY_ARGS) $(PYTEST_ARGS)

# PYTHONPATH: this tree's package even where pip has installed another into the venv.
demo: build
	PYTHONPATH=$(CURDIR) $(PY) examples/demo.py

bench: build
	PYTHONPATH=$(CURDIR) $(PY) -m tf_ops.bench $(BENCH_ARGS)

bench-models: build
	PYTHONPATH=$(CURDIR) $(PY) -m tf_ops.bench.models $(BENCH_ARGS)

# pip builds with scikit-build-core (pyproject.toml) against the venv's TensorFlow, in a CMake
# tree of its own that later `make wheel` runs reuse.
wheel: venv
	TF_OPS_CUDA=$(TF_OPS_CUDA) TF_OPS_XLA=$(TF_OPS_XLA) $(PY) -m pip wheel --quiet \
	  --no-build-isolation --no-deps --wheel-dir dist \
	  --config-settings=build-dir=$(abspath $(WHEEL_BUILD_DIR)) .
	@ls -1t dist/*.whl | head -1

# The library lives inside the package (tf_ops/_tf_ops.so) and is tied to one TensorFlow, so
# another TensorFlow gets a copy of the sources (build-tf2.20/src: what git tracks or would,
# mtimes kept, so only what changed recompiles), its own venv (.venv-tf2.20, or
# .venv-tf2.20-cpu for tensorflow-cpu) and build trees (build-tf2.20/), and runs `make test`
# there. PYTEST_ARGS='-m "not slow"' runs the quick part.
COMPAT := tf$(TF)$(patsubst tensorflow%,%,$(TF_DIST))
compat:
	@test "$(origin TF)" = "command line" \
	  || (echo "usage: make compat TF=2.20 [TF_DIST=tensorflow-cpu] [PYTEST_ARGS=...]"; exit 2)
	tools/copy_sources.sh build-$(COMPAT)/src
	$(MAKE) -C build-$(COMPAT)/src test VENV=$(CURDIR)/.venv-$(COMPAT) \
	  BUILD_DIR=$(CURDIR)/build-$(COMPAT)/build \
	  ENGINE_TEST_DIR=$(CURDIR)/build-$(COMPAT)/engine-test ENGINE_TEST=$(ENGINE_TEST) \
	  TF=$(TF) TF_DIST=$(TF_DIST) PYTEST_ARGS='$(PYTEST_ARGS)'

# CPU kernels only; installs Debian's bazel-bootstrap when bazel is missing,
# and shuts the Bazel server down afterwards.
bazel-build: venv
	tools/bazel_build.sh $(PY)

# On a GPU machine without TensorFlow: build and run the CUDA self-test.
gpu-selftest:
	tools/gpu_selftest.sh

# Without a GPU: the same self-test with the CUDA sources compiled as C++
# against tests/gpu/cuda_on_cpu/, plain and under ASan + UBSan and TSan, and
# the deliberate kernel bugs it must catch (CI runs it).
gpu-selftest-cpu:
	tools/gpu_selftest_cpu.sh

# Venvs (.venv, .venv-tf*) stay; the install tests' venvs under build-tests/ go.
clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log tf_ops/_tf_ops*.so build-gpu-selftest-cpu \
	  tf_ops/_tf_ops*.build.json build-bazel $(ENGINE_TEST_DIR) $(WHEEL_BUILD_DIR) build-pip dist \
	  build-tests build-tf* build-tensorflow-cpu-* build-gpu-selftest-script

# The accuracy tool (tools/accuracy/, TF-free): accuracy_sweep measures every
# op's largest error over every float32, half and bfloat16 input on each
# instruction-set path; engine_microbench times the engine's loops.
#   make accuracy   the full sweep (about 40 minutes on 2 cores); rewrites the
#                   accuracy table in docs/ops.md, which `make test` checks a
#                   sampled sweep against (tests/activation/test_accuracy.py)
#   make accuracy-sampled  the same table from 2^24 float32 inputs per variant
#                   (about a minute); the table says it is sampled
#   ACCURACY_OPS=Relu6,Tanh  either one for these ops only (a new activation),
#                   keeping the table's other rows
ACCURACY_DIR := build-accuracy
.PHONY: accuracy-build accuracy accuracy-sampled accuracy-clean
accuracy-build:
	cmake -S tools/accuracy -B $(ACCURACY_DIR) > /dev/null
	cmake --build $(ACCURACY_DIR) --parallel 2

accuracy: accuracy-build
	$(PYTHON) tools/accuracy/accuracy_table.py --build-dir $(ACCURACY_DIR) --full \
	  --ops "$(ACCURACY_OPS)" --write docs/ops.md

accuracy-sampled: accuracy-build
	$(PYTHON) tools/accuracy/accuracy_table.py --build-dir $(ACCURACY_DIR) \
	  --ops "$(ACCURACY_OPS)" --write docs/ops.md

accuracy-clean:
	rm -rf $(ACCURACY_DIR)

test: accuracy-build
clean: accuracy-clean
