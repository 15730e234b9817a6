# hutch-broker image. Build from the repository root:
#   docker build -f docker/broker.Dockerfile -t hutch-broker:0.1.0 .
# Runs as uid 1000 with a read-only root filesystem (the operator's pod spec mounts the data
# volume at /var/lib/hutch, the config at /etc/hutch and an emptyDir at /tmp).
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
# A C compiler and zlib's headers for the broker's C extension (broker/setup.py, optional in a
# pip install but built here: the stage fails if it cannot be). python:3.11-slim has Python's
# headers; the node tier's stand-in base (a Debian python3, docs/real-node.md) needs python3-dev.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev zlib1g-dev \
    && if [ ! -e "$(python3 -c 'import sysconfig; print(sysconfig.get_path("include"))')/Python.h" ]; \
       then apt-get install -y --no-install-recommends python3-dev; fi \
    && rm -rf /var/lib/apt/lists/*
# Only the broker's distribution (broker/pyproject.toml) and hutch_cli's (cli/pyproject.toml:
# hutchctl, and the load generator `kubectl hutch perf-test` runs as a Job in this image): no
# operator or Spark code, and a change outside broker/ and cli/ neither reaches it nor rebuilds it.
COPY broker/ broker/
COPY cli/ cli/
RUN pip wheel --no-cache-dir --wheel-dir /wheels ./broker ./cli \
    && python3 -m zipfile -l /wheels/hutch_broker-*.whl | grep -q 'hutch_broker/store/_runs\.[^ ]*\.so ' \
    && python3 -m zipfile -l /wheels/hutch_broker-*.whl | grep -q 'hutch_broker/protocol/_content\.[^ ]*\.so '

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --uid 1000 --user-group --no-create-home --home-dir /var/lib/hutch hutch \
    && mkdir -p /var/lib/hutch /etc/hutch && chown 1000:1000 /var/lib/hutch
USER 1000:1000
EXPOSE 5672 15672
VOLUME ["/var/lib/hutch"]
ENTRYPOINT ["hutch-broker"]
CMD ["--amqp-port", "5672", "--http-port", "15672", "--data-dir", "/var/lib/hutch", "--bind", "0.0.0.0"]
