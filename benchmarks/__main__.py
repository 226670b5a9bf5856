"""``python -m benchmarks``: every benchmark this machine can run, side by side with
dask-jobqueue, interleaved; a table (median [range], ratio) on stdout and JSON on disk.

Run it from the repository root, as root, with the CI pools up::

    bash ci/slurm/up.sh && bash ci/sge/up.sh && bash ci/htcondor/up.sh $PWD/.venv
    .venv/bin/pip install -e '.[bench,md]'
    .venv/bin/python -m benchmarks                     # everything, 5 repetitions
    .venv/bin/python -m benchmarks --quick             # one small configuration of each
    .venv/bin/python -m benchmarks --only scale-up --systems slurm --sizes 16

A benchmark whose system is not there is skipped, saying why; the exit status is 0 whatever
the numbers are (1 only for a benchmark that broke). docs/benchmarks.md explains each row.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback

from benchmarks import annotation, busy, gpu, reconcile, reschedule, scaleup, submit
from benchmarks.goals import evaluate
from benchmarks.harness import Results, goal_table, log, machine, table

BENCHMARKS = ("scale-up", "submit", "reschedule", "annotation", "reconcile", "gpu-md", "busy",
              "busy-sim")


def parser() -> argparse.ArgumentParser:
    """The command's options."""
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS),
                   help="run only these benchmarks")
    p.add_argument("--quick", action="store_true",
                   help="one small configuration of each, once, without the scale-up's random "
                   "pauses (what the test suite runs)")
    p.add_argument("--repeats", type=int, help="repetitions of every measure (default 5; "
                   "quick: 1)")
    p.add_argument("--systems", nargs="+", choices=("htcondor", "slurm", "sge"),
                   default=["htcondor", "slurm", "sge"])
    p.add_argument("--sizes", nargs="+", type=int, help="scale-up sizes (default 1 4 16)")
    p.add_argument("--variants", nargs="+", choices=scaleup.NAMES,
                   default=list(scaleup.NAMES), metavar="VARIANT",
                   help="scale-up variants (default: all): " + ", ".join(
                       f"'{name}'" for name in scaleup.NAMES))
    p.add_argument("--seed", type=int, help="seed of the random pauses before HTCondor "
                   "scale-ups (a random phase of the negotiation cycle)")
    p.add_argument("--submit-workers", type=int, help="workers of the submit benchmark "
                   "(default 1000)")
    p.add_argument("--reschedule-samples", type=int, help="samples per arm and queue of the "
                   "reschedule benchmark (default 40; quick: 1)")
    p.add_argument("--reconcile-jobs", type=int, help="tracked jobs (default 10000)")
    p.add_argument("--tasks", type=int, help="tasks of the annotation graphs (default 2000)")
    p.add_argument("--md-on-cpu", action="store_true",
                   help="run the GPU benchmark's workload on the CPU platform where no GPU is "
                   "found (checks the code; no P5 verdict)")
    p.add_argument("--gpu-budget", type=float, help="seconds the GPU benchmark may take "
                   "(default 460: a whole run within 10 minutes on one GPU)")
    p.add_argument("--gpu-steps", type=int, help="steps of each simulation of the GPU "
                   "benchmark's full-size workload (default 10000)")
    p.add_argument("--gpu-settings", nargs="+", choices=tuple(gpu.SETTINGS),
                   help="the sharing settings whose full-size workload the GPU benchmark "
                   "runs (default: every one)")
    p.add_argument("--gpu-sweep", nargs="*", type=int,
                   help="k of the GPU benchmark's sharing sweep, k simulations at once "
                   "(default 2 4 8 16; none: no sweep)")
    p.add_argument("--gpu-json", help="also write the GPU benchmark's raw record (every "
                   "simulation: where and when it ran) to this file")
    p.add_argument("--busy-parts", nargs="+", choices=busy.PARTS, default=list(busy.PARTS),
                   help="the parts of the busy benchmark to run")
    p.add_argument("--json", dest="json_path",
                   help="where to write the JSON (default: a new file in the temp directory)")
    p.add_argument("--markdown", help="also write the tables, as Markdown, to this file")
    return p


def gpu_options(args: argparse.Namespace, quick: bool) -> dict[str, object]:
    """The GPU benchmark's sizes: ``--quick``'s small ones, then what the options say."""
    options: dict[str, object] = (
        {"simulations": 2, "packings": 1, "waters": 100, "steps": 50, "cpu_workers": 1,
         "cpu_threads": 1, "baseline_steps": 50, "sweep": (2,)} if quick else {})
    for key, value in (("budget", args.gpu_budget), ("steps", args.gpu_steps),
                       ("settings", args.gpu_settings), ("sweep", args.gpu_sweep)):
        if value is not None:
            options[key] = tuple(value) if isinstance(value, list) else value
    return options


def main(argv: list[str] | None = None) -> int:
    """Run, print, write; 0 unless a benchmark broke."""
    args = parser().parse_args(argv)
    quick = args.quick
    repeats = args.repeats or (1 if quick else 5)
    sizes = args.sizes or ([2] if quick else [1, 4, 16])
    results = Results(machine=machine())
    results.settings = {"argv": sys.argv[1:] if argv is None else argv, "repeats": repeats,
                        "sizes": sizes, "quick": quick}
    load = os.getloadavg()[0]
    if load > 0.5:
        log(f"the load average is {load:.2f}: something else runs here, numbers will be noisy")
    plan = {
        "scale-up": lambda: scaleup.run(results, args.systems, sizes, repeats, args.variants,
                                        jitter=not quick, seed=args.seed),
        "submit": lambda: submit.run(results, args.systems,
                                     args.submit_workers or (20 if quick else 1000), repeats),
        "reschedule": lambda: reschedule.run(
            results, args.reschedule_samples or (1 if quick else 40), seed=args.seed),
        "annotation": lambda: annotation.run(results, args.tasks or (200 if quick else 2000),
                                             repeats),
        "reconcile": lambda: reconcile.run(results, args.systems,
                                           args.reconcile_jobs or (100 if quick else 10_000),
                                           repeats),
        "gpu-md": lambda: gpu.run(results, repeats, allow_cpu=args.md_on_cpu,
                                  raw_path=args.gpu_json, **gpu_options(args, quick)),
        "busy": lambda: busy.run(results, args.systems, repeats, quick,
                                 tuple(args.busy_parts)),
        "busy-sim": lambda: busy.simulator(results, quick),
    }
    broken = []
    started = time.monotonic()
    for name in BENCHMARKS:
        if name not in args.only:
            continue
        log(f"== {name}")
        try:
            plan[name]()
        except Exception as error:  # a broken benchmark: reported, the others still run
            traceback.print_exc()
            broken.append(f"{name}: {type(error).__name__}: {error}")
            results.skip(name, f"BROKEN: {type(error).__name__}: {error}")
    results.goals = evaluate(results) + busy.goals(results)
    results.machine["seconds"] = round(time.monotonic() - started, 1)
    results.machine["load_average_after"] = os.getloadavg()
    path = args.json_path or os.path.join(
        tempfile.gettempdir(), f"hybrid-bench-{time.strftime('%Y%m%d-%H%M%S')}.json")
    results.write_json(path)
    text = report(results)
    print(text)
    print(f"\nJSON: {path}")
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(text + "\n")
    return 1 if broken else 0


def report(results: Results) -> str:
    """The measures, the goals and the skips, as Markdown."""
    m = results.machine
    lines = [f"Measured {m['date']} on {m['host']}: {m['cpus']} CPUs"
             + (f" ({m['cpu_model']})" if m.get("cpu_model") else "")
             + (f", {m['memory_gib']} GiB" if m.get("memory_gib") else "")
             + f", Python {m['python']}; "
             + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
             + f". Load average before: {m['load_average'][0]:.2f}; {m.get('seconds')} s.",
             ""]
    for text in (scaleup.summary(results), scaleup.parts(results)):
        if text:
            lines += [text, ""]
    lines += [table(results), "", goal_table(results.goals)]
    if results.skips:
        lines += ["", "Skipped:"] + [f"- {s.benchmark}: {s.why}" for s in results.skips]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
