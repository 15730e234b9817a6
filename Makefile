# Hutch developer entry points.  Every target installs what it needs itself.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run broker test check fast unit bench bench-report e2e bootstrap rabbitmq k8s-bins images plane clean

bootstrap:
	@bash scripts/bootstrap.sh

## The main job: the whole chain in real containers on a local node, then a summary (ARGS=--keep keeps it up).
run: bootstrap
	@bash scripts/quickstart.sh $(ARGS)

## A lone hutch-broker on 127.0.0.1 (AMQP 5672, management 15672).
broker: bootstrap
	@bash scripts/run.sh

## The whole test suite, exactly as CI runs it (ARGS=... go to every level's pytest). The node
## level's Go builds (k8s-bins) run in the background meanwhile, from scripts/test.sh.
test: bootstrap rabbitmq check
	@bash scripts/test.sh $(ARGS)

## mypy keeps its incremental cache beside the other slow builds (HUTCH_CACHE, ~/.cache/hutch): a
## fresh clone then checks only what changed (28 s of CPU without it, under 1 s with it). The
## cache is validated by each file's content hash, not its path or mtime, so one cache serves every
## clone; SQLite keeps two checks at once from mixing their writes. import-linter's own cache is
## not used: it once kept a contract passing here that failed in a fresh clone, and without it
## the check takes half a second.
check: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check broker operator spark cli localkube demo testing tests e2e bench
	$(VENV)/bin/mypy --sqlite-cache --cache-dir "$${HUTCH_CACHE:-$$HOME/.cache/hutch}/mypy"
	$(VENV)/bin/lint-imports --no-cache

## The fast level: pure, in-memory tests, no process and no socket, in seconds (docs/testing.md#test-levels).
fast: bootstrap
	$(PY) -m pytest tests -m fast -q -n 2

## The fast level and the broker level without RabbitMQ and the long cases: still starts brokers and Spark.
unit: bootstrap
	$(PY) -m pytest tests -m "not rabbitmq and not k8s and not slow"

rabbitmq:
	@bash scripts/install-rabbitmq.sh

## Control-plane binaries and the Spark Operator controller (Go module proxy), and the node tier's Debian packages (docs/real-node.md).
k8s-bins:
	@bash scripts/install-node-deps.sh
	@bash localkube/gobuild/build-binaries.sh
	@bash localkube/gobuild/build-spark-operator.sh >/dev/null

## The node tier's images (pause, hutch-broker, hutch-operator) from docker/*.Dockerfile, without Docker; cached.
images: bootstrap k8s-bins
	$(PY) -m hutch_localkube.images build pause broker operator

## A local control plane for manual work (Ctrl-C stops it).
plane: bootstrap k8s-bins
	$(PY) -m hutch_localkube up --tier workloads

## The chain under pytest on the local real node; E2E_KUBECONFIG=path runs it on kind or any cluster.
e2e: bootstrap k8s-bins
	$(PY) -m pytest e2e -m e2e $(if $(E2E_KUBECONFIG),--kubeconfig=$(E2E_KUBECONFIG))

## Broker, operator and Spark benchmarks side by side with RabbitMQ, then docs/bench/report.md.
bench: bootstrap rabbitmq k8s-bins
	$(PY) bench/all.py

bench-report: bootstrap
	$(PY) bench/comparison.py

clean:
	rm -rf $(VENV) .hutch-dev test-artifacts
