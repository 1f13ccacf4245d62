"""``python -m bayesslr``: the ``bayesslr`` command (:mod:`bayesslr.startup`)."""

from bayesslr.startup import main

main()
