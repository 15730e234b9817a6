# hutch-spark-operator: the Kubeflow Spark Operator's controller (v2.3.0) on our hutch-spark
# image. The controller runs `$SPARK_HOME/bin/spark-submit` for every SparkApplication, so its
# image needs the very Spark (pyspark 4.3.0, Java 17) the jobs run: hutch-spark has it, and
# sets SPARK_HOME. The binary is built from the Go module proxy outside this file and given to
# it as a named build context. From the repository root:
#   docker build -f spark/jobs/Dockerfile -t localhost/hutch/hutch-spark:0.1.0 .
#   docker build -f docker/spark-operator.Dockerfile \
#     --build-context \
#       spark-operator-bin="$(bash localkube/gobuild/build-spark-operator.sh | tail -1)/bin" \
#     -t localhost/hutch/hutch-spark-operator:0.1.0 .
# The node tier builds the same file without Docker (hutch_localkube.images, docs/real-node.md).
# Upstream's image differs in its base (docker.io/library/spark) and its entrypoint.sh, which
# fakes a passwd entry for a random uid: ours has user spark (185) and runs the binary under
# tini directly, as upstream's entrypoint ends up doing.
FROM localhost/hutch/hutch-spark:0.1.0
COPY --from=spark-operator-bin spark-operator /usr/bin/spark-operator
USER 185:185
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/usr/bin/spark-operator"]
CMD ["--help"]
