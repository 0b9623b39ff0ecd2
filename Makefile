# hpcenv: every system package, service and configuration comes from these targets.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
HPCENV := $(VENV)/bin/hpcenv
SITE  ?= local
RESULTS ?= results

.PHONY: install host venv images test unit lint golden smoke-test build-local bench bench-test sitebuild-horovod clean

install: host venv

host:                      ## system packages (podman, runc, debootstrap, slurm, munge, sshd, shellcheck, Open MPI), qemu-user-static handlers, the local-bind site MPI, MPICH 5 (MPI-5 ABI) and Apptainer
	scripts/host-setup.sh
	scripts/emulation-setup.sh
	scripts/site-mpi-setup.sh
	scripts/mpi-abi-setup.sh
	scripts/site-apptainer-setup.sh
	scripts/podman-hpc-setup.sh

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[all,dev]'
	touch $@

# The images the tests use (tests/services.py, test_image.py, test_sif.py, the rehearsals' SIF,
# the base image under them) and smoke-test smokes; hpcenv build reuses what is already built.
# The tests look for the local site's: keep SITE=local (the default) for `make test`.
images: install            ## build the local horovod-cpu image (podman) and its SIF, and the base under them
	$(HPCENV) build --site $(SITE) --recipe horovod-cpu --format both

# The images only the real tests use are built in the background (tests/image_builds.py; a cold
# build leaves a core idle much of the time) while, in turn: the unit tests (no container or
# service) run on both cores (pytest-xdist); then the real tests marked `alongside` (they build
# no image, need none of those images and time nothing: Slurm, sshd, jobs, the local image's and
# SIF's own tests, Apptainer) one at a time. The other real tests then run one at a time on a
# quiet machine: their fixtures find those images cached (a build that failed is built again
# there, and its test says why). Every part always runs; make test fails when any does.
UNIT := not podman and not slurm and not ssh and not apptainer

test: images               ## the whole test suite (unit + real podman/Slurm/sshd/Apptainer tests); CI=true: nothing may skip
	@mkdir -p $(RESULTS)
	$(PY) tests/image_builds.py $(HPCENV) > $(RESULTS)/test-image-builds.log 2>&1 & builds=$$!; \
	$(PY) -m pytest -q -n 2 -m "$(UNIT)" tests; unit=$$?; \
	$(PY) -m pytest -q -p no:xdist --durations=10 -m "alongside" tests; along=$$?; [ $$along -ne 5 ] || along=0; \
	wait $$builds; cat $(RESULTS)/test-image-builds.log; \
	$(PY) -m pytest -q -p no:xdist --durations=30 -m "not ($(UNIT)) and not alongside" tests; real=$$?; \
	test $$unit -eq 0 && test $$along -eq 0 && test $$real -eq 0  # the slowest real tests: where the set-up time goes

unit: venv                 ## fast tests only (no containers or services), on both cores
	$(PY) -m pytest -q -n 2 -m "$(UNIT)" tests

lint: venv                 ## one formatting policy (ruff format), ruff's checks and mypy; tests/test_style.py runs the same under make test
	$(VENV)/bin/ruff format --check hpcenv tests
	$(VENV)/bin/ruff check hpcenv tests
	$(VENV)/bin/mypy hpcenv

golden: venv               ## regenerate tests/golden (review the diff before committing)
	$(PY) -m hpcenv.golden tests/golden

build-local: install       ## bootstrap the base and build the local image with podman
	$(HPCENV) build --site $(SITE)

# The podman run holds the site's references (same-run ratios that a 2x slowdown fails, see
# site-configs/local.yaml); the SIF run is untuned and unbound by design, so it only reports them.
smoke-test: images         ## build the local image (podman + SIF), measure its tuning, smoke both
	$(HPCENV) tune --site $(SITE) --ranks-per-node 2 --measure --quick --budget 90 --if-stale
	$(HPCENV) smoke --site $(SITE) --results $(RESULTS)/smoke --check-references
	$(HPCENV) smoke --site $(SITE) --sif oci --results $(RESULTS)/smoke-sif

bench: install             ## benchmarks: Markdown report, PNG plots and JSON under results/bench
	$(HPCENV) build --site $(SITE) --recipe horovod-ccl --format oci  # section ccl; ~5 min cold
	$(HPCENV) bench --site $(SITE) --out $(RESULTS)/bench

bench-test: install        ## opt-in: the bench's training section for real (minGPT on local and the two rehearsal nodes: ~15 min)
	HPCENV_BENCH_TESTS=1 $(PY) -m pytest -q tests/test_bench_training.py

sitebuild-horovod: install ## opt-in: the site-build rehearsal with Horovod compiled against the mounted site MPI (builds horovod-cpu for local-sitebuild and its SIF: ~10 min cold)
	HPCENV_SITEBUILD_HOROVOD=1 $(PY) -m pytest -q tests/test_rehearsal_sitebuild.py -k horovod

clean:
	rm -rf out $(RESULTS)
