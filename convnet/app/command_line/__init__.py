"""The command line: where the program starts, the parser, and what each mode does.

May import every other app sub-package and the app's base modules.
"""
