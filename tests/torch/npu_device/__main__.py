"""python -m npu_device BUILD: builds the test device (see __init__.py) and prints the module's path."""
import sys

from . import build

if len(sys.argv) != 2:
    raise SystemExit("usage: python -m npu_device BUILD_DIR")
print(build(sys.argv[1]))
