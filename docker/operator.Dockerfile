# hutch-operator image. Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t hutch-operator:0.1.0 .
# Runs as uid 65532 (the chart's runAsUser too) with a read-only root filesystem; Kopf needs no
# writable path. Tested without Docker on the node tier (docs/real-node.md).
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
# Only the operator's distribution (operator/pyproject.toml): the image holds no broker, Spark or
# CLI code, and a change outside operator/ neither reaches it nor rebuilds it.
COPY operator/ operator/
RUN pip wheel --no-cache-dir --wheel-dir /wheels ./operator

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
# A named user for uid 65532: Kopf derives its peering identity from getpass.getuser(), which
# fails (KeyError: 'getpwuid(): uid not found') for a uid without a passwd entry.
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --uid 65532 --user-group --no-create-home --home-dir /nonexistent hutch-operator
USER 65532:65532
EXPOSE 8080 8081
# The chart adds --peering, --liveness and the namespace flags.
ENTRYPOINT ["python", "-m", "hutch_operator"]
