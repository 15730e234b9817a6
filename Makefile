# Hutch developer entry points.  Every target installs what it needs itself.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test check unit bench bootstrap rabbitmq k8s-bins plane clean

bootstrap:
	@bash scripts/bootstrap.sh

## The main job: a hutch-broker on localhost (AMQP 5672, management 15672).
run: bootstrap
	@bash scripts/run.sh

## The whole test suite, exactly as CI runs it.
test: bootstrap rabbitmq k8s-bins check
	@bash scripts/test.sh

check: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check broker operator spark testing tests bench
	$(VENV)/bin/mypy

unit: bootstrap
	$(PY) -m pytest tests -m "not rabbitmq and not k8s and not slow"

rabbitmq:
	@bash scripts/install-rabbitmq.sh

k8s-bins:
	@bash tests/k8s/build-binaries.sh

## A local control plane for manual work (Ctrl-C stops it).
plane: bootstrap k8s-bins
	$(PY) tests/k8s/plane.py up --tier workloads

bench: bootstrap rabbitmq
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .hutch-dev test-artifacts
