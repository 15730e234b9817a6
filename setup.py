"""The development install's C extensions: the broker's and hutch-spark's, as broker/setup.py
and spark/setup.py declare them.

pyproject.toml holds everything else; see broker/setup.py for why this file exists.
"""

import runpy

from setuptools import setup

broker = runpy.run_path("broker/setup.py", run_name="broker_setup")
spark = runpy.run_path("spark/setup.py", run_name="spark_setup")
setup(ext_modules=broker["extensions"]("broker/") + spark["extensions"]("spark/"))
