"""``python -m convnet.make_data``."""

import sys

from convnet.make_data.cli import main

sys.exit(main())
