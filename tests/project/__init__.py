"""Checks of the whole project: its import graph and what the package installs."""
