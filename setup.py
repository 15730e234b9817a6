"""The development install's C extensions: the broker's, as broker/setup.py declares them.

pyproject.toml holds everything else; see broker/setup.py for why this file exists.
"""

import runpy

from setuptools import setup

broker = runpy.run_path("broker/setup.py", run_name="broker_setup")
setup(ext_modules=broker["extensions"]("broker/"))
