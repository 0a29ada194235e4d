"""``--compare``: train several configs of one network, then tables, a verdict and a picture.

May import :mod:`convnet.app.prediction`, :mod:`convnet.app.run` and the app's base modules.
"""
