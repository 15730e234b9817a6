"""``python -m hutch_operator [kopf run options]``: kopf run -m hutch_operator.handlers."""

import sys

from kopf import cli


def main() -> None:
    cli.main(["run", "-m", "hutch_operator.handlers", *sys.argv[1:]])


if __name__ == "__main__":
    main()
