"""``python -m hutch_testing.plane up|down`` (``make plane``): the CLI lives in ``cli``."""

import sys

from hutch_testing.plane import cli

sys.exit(cli.main())
