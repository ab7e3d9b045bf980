"""Children that Ctrl-C reaches, whatever the test run's own SIGINT disposition."""
import sys

# A shell starts background jobs with SIGINT ignored and children inherit that; Python then installs
# no KeyboardInterrupt handler, so a test that sends SIGINT to a child would wait for nothing. The
# wrapper sets SIGINT back to its default and execs the command (same pid; no fork of this process).
_DEFAULT_SIGINT_THEN_EXEC = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
)


def interruptible(command: list[str]) -> list[str]:
    """`command` (its first item a path to an executable) started so that SIGINT reaches it as Ctrl-C does."""
    return [sys.executable, "-c", _DEFAULT_SIGINT_THEN_EXEC, *command]
