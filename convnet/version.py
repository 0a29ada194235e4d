"""The program's version: in a module of its own so that any part can read it without
importing the package's public face (:mod:`convnet`, whose calls stand on top of it)."""

__version__ = "0.1.0"
