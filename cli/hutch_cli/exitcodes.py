"""The exit codes hutchctl returns: rabbitmqctl's, which are the BSD sysexits values.

Why a module: scripts written against rabbitmqctl branch on these numbers, so each verb's failure
maps to the code rabbitmqctl 3.10.8 returns for the same mistake (measured side by side in
tests/sidebyside/test_hutchctl.py), not to a code chosen for tidiness.
"""

OK = 0
USAGE = 64  # EX_USAGE: unknown verb or option, wrong number of arguments, bad option value
DATA_ERROR = 65  # EX_DATAERR: e.g. the vhost does not exist, a definitions file is unreadable
NO_USER = 67  # EX_NOUSER: the user does not exist
UNAVAILABLE = 69  # EX_UNAVAILABLE: the broker is down or refused us, or rejected the request
SOFTWARE = 70  # EX_SOFTWARE: e.g. add_user for a user that exists
TEMP_FAILURE = 75  # EX_TEMPFAIL: the request timed out
