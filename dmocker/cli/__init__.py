"""Command-line edge of dmocker: one module per verb, wired up in :mod:`dmocker.cli.main`.

A ``dmocker`` process is ours, so its start-up is set here, before anything imports numpy: the
replay and the checker use numpy for elementwise work only, never for linear algebra, and
OpenBLAS's thread pool (started with numpy, one thread per core) costs about 0.1 CPU-second per
process for nothing.  A value the user set wins; a Python caller of :func:`dmocker.replay.run`
can set ``OPENBLAS_NUM_THREADS=1`` itself for the same saving.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
