"""``python -m convnet.make_data``.

As in ``convnet.py``, the first statement holds Ctrl-C and SIGTERM back until the
handlers that end the run with one line are in place (:mod:`convnet.stop_signals`);
the packages ``convnet`` and ``convnet.make_data``, which Python imports before
this module, import nothing.
"""

if __name__ == "__main__":
    import _signal  # built in and already loaded: see convnet.py
    import sys

    try:
        if hasattr(_signal, "pthread_sigmask"):  # POSIX only
            _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT, _signal.SIGTERM})
        from convnet.make_data.launcher import main

        code = main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
