#!/usr/bin/env bash
# Fetch RabbitMQ PerfTest (com.rabbitmq:perf-test) and its runtime dependencies from Maven Central.
#
# Why: bench/ drives RabbitMQ 3.10.8 and hutch-broker with the same Java load generator the RabbitMQ
# team uses, so the comparison does not hinge on our own client. Maven Central only carries the thin
# jar (the uber jar lives on GitHub releases, which we cannot reach), so we resolve it with the
# maven-dependency-plugin from a throw-away pom and run it as `java -cp 'DIR/lib/*'
# com.rabbitmq.perf.PerfTest`.
#
# Cached: once DIR/lib holds the jar, the script does nothing. DIR defaults to
# ~/.cache/hutch/perftest; override with PERFTEST_DIR, the version with PERFTEST_VERSION.
set -euo pipefail

readonly VERSION="${PERFTEST_VERSION:-2.22.1}"
readonly DIR="${PERFTEST_DIR:-${HOME}/.cache/hutch/perftest}"
readonly LIB="${DIR}/lib"
readonly MARKER="${LIB}/perf-test-${VERSION}.jar"

log() { echo "fetch-perftest: $*" >&2; }

write_pom() {
    cat >"$1/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.hutch</groupId>
  <artifactId>perftest-fetch</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>com.rabbitmq</groupId>
      <artifactId>perf-test</artifactId>
      <version>${VERSION}</version>
    </dependency>
  </dependencies>
</project>
EOF
}

main() {
    if [[ -f "${MARKER}" ]]; then
        log "cached: ${MARKER}"
        return 0
    fi
    command -v mvn >/dev/null || { log "mvn not found (apt-get install -y maven)"; exit 1; }
    WORK="$(mktemp -d)"
    trap 'rm -rf "${WORK}"' EXIT
    write_pom "${WORK}"
    rm -rf "${LIB}.partial"
    log "resolving com.rabbitmq:perf-test:${VERSION} from Maven Central"
    mvn -B -q -Dstyle.color=never -f "${WORK}/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="${LIB}.partial"
    test -f "${LIB}.partial/perf-test-${VERSION}.jar"
    rm -rf "${LIB}"
    mv "${LIB}.partial" "${LIB}"
    log "installed into ${LIB}"
}

main "$@"
