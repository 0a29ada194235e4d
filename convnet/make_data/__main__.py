"""``python -m convnet.make_data``."""

import sys

from convnet.make_data.cli import main

if __name__ == "__main__":  # not again in the worker processes, which import this module
    sys.exit(main())
