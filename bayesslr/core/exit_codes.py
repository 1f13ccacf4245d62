"""Exit statuses of the ``bayesslr`` command, for every verb (declared once here)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_BAD_INPUT = 2  # one line on stderr naming the problem; also: a results directory in use
EXIT_CELLS_FAILED = 3  # a sweep finished with failed cells, or a single-run verb's cell failed
EXIT_WRITE_FAILED = 4  # a results file could not be written (the path and the OS error)
EXIT_SCHEDULER_LOST = 5  # a sweep lost its dask scheduler; cells not run stay to do (rerun)
EXIT_SIGNAL_BASE = 128  # interrupted by a signal: 128 + signum (130 SIGINT, 143 SIGTERM)
EXIT_INTERRUPTED = EXIT_SIGNAL_BASE + 2
