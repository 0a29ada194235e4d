"""``python -m convnet.import_onnx``.

As in ``convnet.py``, the first statement holds Ctrl-C and SIGTERM back until the
handlers that end the run with one line are in place (:mod:`convnet.stop_signals`).
"""

if __name__ == "__main__":
    import _signal  # built in and already loaded: see convnet.py
    import sys

    try:
        if hasattr(_signal, "pthread_sigmask"):  # POSIX only
            _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT, _signal.SIGTERM})
        from convnet.stop_signals import exit_cleanly_on_early_signals

        exit_cleanly_on_early_signals()
        from convnet.import_onnx.cli import main

        code = main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
