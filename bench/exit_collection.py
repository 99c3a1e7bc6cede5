"""Process exit with and without `envace.cli.skip_exit_collection` (the collector's permanent generation for
every live object before the interpreter shuts down), on a process that holds the demo's SFT data.

    .venv/bin/python bench/exit_collection.py [--pairs 3] [--tasks 3000]

Each child builds the demo's tiny model and tokenizer (600 corpus tasks, seed 0) and the SFT samples of
`--tasks` tool-world tasks (envace.trainers.sft_samples.build_samples), prints a time stamp and its live
object count, then exits: the baseline plainly (`sys.exit(0)`, as any Python program), the other arm the way
the `envace` command exits (`skip_exit_collection()`, then `sys.exit(0)`). The parent times from the stamp
to the child's end; arms alternate, `--pairs` pairs, and the script prints each pair, the medians and their
ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CHILD = """
import sys, tempfile, time, gc
from pathlib import Path
from envace.cli import skip_exit_collection
from envace.data.config import DataConfig
from envace.data.tasks import load_tasks
from envace.models.loading import load_policy
from envace.models.tiny import TinyModelConfig
from envace.pipeline import build_model
from envace.trainers.config import SFTConfig
from envace.trainers.sft_samples import build_samples

model_dir = build_model(Path(tempfile.mkdtemp()) / "model", 600, TinyModelConfig(seed=0))
cfg = SFTConfig(model=str(model_dir), data=DataConfig(n_tasks=int(sys.argv[2]), seed=0))
model, tok = load_policy(model_dir, device="cpu")
samples = build_samples(load_tasks(cfg.data), tok, cfg)
print(time.time(), len(gc.get_objects()), flush=True)
if sys.argv[1] == "freeze":
    skip_exit_collection()
sys.exit(0)
"""


def exit_seconds(arm: str, tasks: int) -> tuple[float, int]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, arm, str(tasks)], stdout=subprocess.PIPE, text=True)
    stamp, objects = child.stdout.readline().split()
    child.wait()
    end = time.time()
    if child.returncode != 0:
        raise SystemExit(f"child ({arm}) exited {child.returncode}")
    return end - float(stamp), int(objects)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=3000)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"plain exit": [], "skip_exit_collection": []}
    objects = 0
    for pair in range(args.pairs):
        arms = ["plain", "freeze"] if pair % 2 == 0 else ["freeze", "plain"]
        got = {}
        for arm in arms:
            got[arm], objects = exit_seconds(arm, args.tasks)
        times["plain exit"].append(got["plain"])
        times["skip_exit_collection"].append(got["freeze"])
        print(f"pair {pair}: plain exit {got['plain']:.3f} s, skip_exit_collection {got['freeze']:.3f} s")
    plain, frozen = (statistics.median(times[k]) for k in times)
    print(f"live objects at exit: {objects}; median exit time: plain {plain:.3f} s, "
          f"skip_exit_collection {frozen:.3f} s (x{plain / frozen:.1f} faster; baseline: plain exit)")


if __name__ == "__main__":
    main()
