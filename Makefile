# tf_ops: every target does its own set-up from a fresh clone, idempotently.
#   make build   .venv with the pinned TensorFlow + tools, then the op library
#   make test    build, the engine's sanitizer test, then the pytest suite
#   make engine-test  the CPU engine under ASan + UBSan (TF-free, tests/engine/)
#   make demo    build, then a short script using the ops from TF and Keras
#   make bench   build, then the benchmark suite (BENCH_ARGS="--quick" for ~1 min)
#   make bazel-build  the CPU library with Bazel, in build-bazel/ (see README)
# TF_OPS_CUDA=AUTO|ON|OFF chooses the CUDA kernels (AUTO: when nvcc is found),
# TF_OPS_XLA=AUTO|ON|OFF the XLA lowerings (AUTO: when TF has the headers).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TF_OPS_CUDA ?= AUTO
TF_OPS_XLA ?= AUTO
BUILD_DIR := build
# The requirements file's checksum names the stamp, so editing it reinstalls.
REQ_STAMP := $(VENV)/.installed-$(shell cksum requirements-dev.txt | cut -d' ' -f1)

.PHONY: venv build engine-test test demo bench gpu-selftest bazel-build clean

venv: $(REQ_STAMP)

$(REQ_STAMP): requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	rm -f $(VENV)/.installed-* && touch $@

build: venv
	cmake -S . -B $(BUILD_DIR) -DPython3_EXECUTABLE=$(abspath $(PY)) \
	  -DTF_OPS_CUDA=$(TF_OPS_CUDA) -DTF_OPS_XLA=$(TF_OPS_XLA) \
	  > $(BUILD_DIR).configure.log 2>&1 \
	  || (cat $(BUILD_DIR).configure.log; exit 1)
	grep -E "tf_ops:" $(BUILD_DIR).configure.log
	cmake --build $(BUILD_DIR) --parallel 2

# The CPU engine and activation math, TF-free, built with AddressSanitizer and
# UndefinedBehaviorSanitizer (Eigen for half/bfloat16 comes from the TF wheel).
ENGINE_TEST_DIR := build-engine-test
engine-test: venv
	mkdir -p $(ENGINE_TEST_DIR)
	cmake -S tests/engine -B $(ENGINE_TEST_DIR) -DPython3_EXECUTABLE=$(abspath $(PY)) \
	  > $(ENGINE_TEST_DIR)/configure.log 2>&1 \
	  || (cat $(ENGINE_TEST_DIR)/configure.log; exit 1)
	cmake --build $(ENGINE_TEST_DIR) --parallel 2
	$(ENGINE_TEST_DIR)/engine_sanitizer_test

test: build engine-test
	$(PY) -m pytest $(PYTEST_ARGS)

demo: build
	PYTHONPATH=$(CURDIR) $(PY) examples/demo.py

bench: build
	PYTHONPATH=$(CURDIR) $(PY) -m tf_ops.bench $(BENCH_ARGS)

# CPU kernels only; installs Debian's bazel-bootstrap when bazel is missing,
# and shuts the Bazel server down afterwards.
bazel-build: venv
	tools/bazel_build.sh $(PY)

# On a GPU machine without TensorFlow: build and run the CUDA self-test.
gpu-selftest:
	tools/gpu_selftest.sh

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log tf_ops/_tf_ops.so \
	  tf_ops/_tf_ops.build.json build-bazel $(ENGINE_TEST_DIR)

# The accuracy tool (tools/accuracy/, TF-free): accuracy_sweep measures every
# op's largest error over every float32, half and bfloat16 input on each
# instruction-set path; engine_microbench times the engine's loops.
#   make accuracy   the full sweep (about an hour on 2 cores); rewrites the
#                   accuracy table in docs/ops.md, which `make test` checks a
#                   sampled sweep against (tests/test_accuracy.py)
#   make accuracy-sampled  the same table from 2^24 float32 inputs per variant
#                   (minutes, not an hour); the table says it is sampled
ACCURACY_DIR := build-accuracy
.PHONY: accuracy-build accuracy accuracy-sampled accuracy-clean
accuracy-build:
	cmake -S tools/accuracy -B $(ACCURACY_DIR) > /dev/null
	cmake --build $(ACCURACY_DIR) --parallel 2

accuracy: accuracy-build
	$(PYTHON) tools/accuracy/accuracy_table.py --build-dir $(ACCURACY_DIR) --full \
	  --write docs/ops.md

accuracy-sampled: accuracy-build
	$(PYTHON) tools/accuracy/accuracy_table.py --build-dir $(ACCURACY_DIR) \
	  --write docs/ops.md

accuracy-clean:
	rm -rf $(ACCURACY_DIR)

test: accuracy-build
clean: accuracy-clean
