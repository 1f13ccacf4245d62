"""Build or extend the inference benchmark's stored ground truth
(``bayesslr/data/inference_reference.nc``; the builder is :mod:`bayesslr.ground_truth`, the
reader :mod:`bayesslr.inference.reference`; docs/inference.md, "Extending the reference").

    nice -n 10 python benchmarks/studies/ground_truth.py build --work DIR [--only D=100]
        [--no-theory]
    python benchmarks/studies/ground_truth.py assemble --work DIR [--out bayesslr/data/...]

``build`` is resumable: each task is one JSON file in ``DIR``, skipped when present; ``--only
field=value`` (repeatable) selects tasks of :func:`bayesslr.ground_truth.preset_tasks` by their
fields. ``assemble`` collects the finished tasks into the netCDF dataset (by default the
packaged one).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from study_cli import selected, study_parser

from bayesslr.ground_truth import RefSettings, assemble_ground_truth, build, preset_tasks
from bayesslr.inference.reference import REFERENCE_FILE

PACKAGED = Path(__file__).resolve().parents[2] / "bayesslr" / "data" / REFERENCE_FILE


def main(argv: list[str] | None = None) -> int:
    ap, sub = study_parser("python benchmarks/studies/ground_truth.py",
                           {"build": "run the reference chains (resumable)",
                            "assemble": "collect finished tasks into the netCDF dataset"},
                           only=("build",))
    sub["build"].add_argument("--no-theory", action="store_true")
    sub["assemble"].add_argument("--out", type=Path, default=PACKAGED)
    args = ap.parse_args(argv)
    from bayesslr.core.jaxconfig import configure_jax

    configure_jax()  # the persistent compilation cache, as the bayesslr command sets it up
    if args.cmd == "build":
        build(args.work, [t for t in preset_tasks() if selected(asdict(t), args.only)],
              RefSettings(), theory=not args.no_theory)
    else:
        print(assemble_ground_truth(args.work, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
