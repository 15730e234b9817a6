"""``python -m hutch_localkube up|down`` (``make plane``): the CLI lives in ``cli``."""

import sys

from hutch_localkube import cli

sys.exit(cli.main())
