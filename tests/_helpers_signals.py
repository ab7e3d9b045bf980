"""Children that Ctrl-C reaches, whatever the test run's own SIGINT disposition."""
import signal


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# A shell starts background jobs with SIGINT ignored and children inherit that; Python then installs
# no KeyboardInterrupt handler, so a test that sends SIGINT to a child would wait for nothing.
INTERRUPTIBLE = {"preexec_fn": _default_sigint}
