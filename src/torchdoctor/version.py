"""The package's identity, for every floor to import (the package root itself is the top floor)."""

import os

__version__ = "0.1.0"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # frames from here are the doctor's own
