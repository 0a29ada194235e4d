"""What a run would cost before it runs: ``--simulate`` and ``--auto-place``.

May import :mod:`convnet.app.run`, the app's base modules and :mod:`convnet.simulate`.
"""
