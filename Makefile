# `make report` and `make test` each set up .venv (when missing or stale) and run.
PYTHON ?= python3
VENV ?= .venv
EXTRAS ?= dev
PYTEST_ARGS ?=
comma := ,
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: setup test test-timm report lab lab-extension lab-grid lab-addition lab-stacks lab-gpu lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt tools/setup-venv.sh
	sh tools/setup-venv.sh "$(PYTHON)" "$(VENV)" "$(EXTRAS)"
	touch $@

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# timm's parity tests, in their own environment (timm imports torchvision, which does not import beside
# the CPU torch of .venv). Status 3 from the setup script: the environment could not be built here.
TIMM_VENV ?= .venv-timm
test-timm:
	sh tools/setup-timm-venv.sh "$(PYTHON)" "$(TIMM_VENV)"
	$(TIMM_VENV)/bin/python -m pytest -p no:cacheprovider tests/functional/test_timm_peers.py

report: setup
	$(BIN)/posenc report --out report

# The length-generalisation lab's cpu preset (one process per core), the sinusoidal lm rows again with
# token embeddings scaled by √d_model (Vaswani et al.), then the report with its tables.
lab: setup
	$(BIN)/torchrun --standalone --nproc_per_node=2 -m posenc.lab run --preset cpu --parallel spread
	$(BIN)/torchrun --standalone --nproc_per_node=2 -m posenc.lab run --preset cpu --parallel spread \
		--task lm --encodings sinusoidal --embedding-scale sqrt
	$(BIN)/posenc report --out report

# The context-extension study (RoPE trained at L, every scaling at 2L, 4L, 8L; docs/LAB.md records a run).
lab-extension: setup
	$(BIN)/torchrun --standalone --nproc_per_node=2 -m posenc.lab run --preset extension --parallel spread
	$(BIN)/posenc report --out report

# The grid study (resolution generalisation of the encodings of image patches), its 2-D sin-cos again
# with token embeddings scaled by √d_model, DINOv3 again trained with its coordinate augmentation
# (rescale 2, as DINOv3's released config), then the report (docs/LAB.md records a run).
lab-grid: setup
	$(BIN)/torchrun --standalone --nproc_per_node=2 -m posenc.lab run --preset grid --parallel spread
	$(BIN)/torchrun --standalone --nproc_per_node=2 -m posenc.lab run --preset grid --parallel spread \
		--encodings sinusoidal_2d --embedding-scale sqrt
	$(BIN)/torchrun --standalone --nproc_per_node=2 -m posenc.lab run --preset grid --parallel spread \
		--encodings dinov3 --coordinate-augmentation rescale=2
	$(BIN)/posenc report --out report

# The addition study (four layouts of the addition task: zero-padded and reversed, index hints, Abacus
# and coupled positions; trained at L digits, tested to 2L), then the report.
lab-addition: setup
	$(BIN)/torchrun --standalone --nproc_per_node=2 -m posenc.lab run --preset addition --parallel spread
	$(BIN)/posenc report --out report

# The stacks study (RoPE, NoPE, ALiBi, RoPE/NoPE interleaved, windowed RoPE with global NoPE, NoPE with
# Llama 4's temperature, FoX at equal steps), then the report.
lab-stacks: setup
	$(BIN)/torchrun --standalone --nproc_per_node=2 -m posenc.lab run --preset stacks --parallel spread
	$(BIN)/posenc report --out report

# The gpu preset, then the addition, extension and stacks studies sized for one GPU, each shared by
# GPU_PROCESSES runs at a time (docs/LAB.md records 15 processes on an H200; one run alone leaves the GPU
# idle between its small kernels), then the report.
GPU_PROCESSES ?= 15
lab-gpu: setup
	OMP_NUM_THREADS=1 $(BIN)/torchrun --standalone --nproc_per_node=$(GPU_PROCESSES) -m posenc.lab run \
		--preset gpu --parallel spread --device cuda
	OMP_NUM_THREADS=1 $(BIN)/torchrun --standalone --nproc_per_node=$(GPU_PROCESSES) -m posenc.lab run \
		--preset gpu-addition --parallel spread --device cuda
	OMP_NUM_THREADS=1 $(BIN)/torchrun --standalone --nproc_per_node=$(GPU_PROCESSES) -m posenc.lab run \
		--preset gpu-extension --parallel spread --device cuda
	OMP_NUM_THREADS=1 $(BIN)/torchrun --standalone --nproc_per_node=$(GPU_PROCESSES) -m posenc.lab run \
		--preset gpu-stacks --parallel spread --device cuda
	$(BIN)/posenc report --out report

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

clean:
	rm -rf $(VENV) $(TIMM_VENV) report figures .pytest_cache .hypothesis
