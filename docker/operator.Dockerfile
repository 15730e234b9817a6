# hutch-operator image. Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t hutch-operator:0.1.0 .
# The chart runs it as uid 65532 with a read-only root filesystem; Kopf needs no writable path.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY broker/ broker/
COPY operator/ operator/
COPY spark/ spark/
COPY testing/ testing/
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[operator]"

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
EXPOSE 8080 8081
# The chart adds --peering, --liveness and the namespace flags.
ENTRYPOINT ["python", "-m", "hutch_operator"]
