"""One training run: the epoch loop, what it prints and logs, its folder, resume and signals.

May import the app's base modules (options, checkpoint, launch) and the packages below ``app``.
"""
