#!/usr/bin/env python3
"""Command-line launcher: ``python convnet.py [options]``.

This file shares its name with the ``convnet`` package; when Python imports
``convnet`` the package wins, so this launcher only calls the package's entry
point (also installed as the ``convnet`` console script).
"""

import sys

if __name__ == "__main__":
    from convnet.app.command_line.launcher import main

    sys.exit(main())
