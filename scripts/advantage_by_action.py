#!/usr/bin/env python3
"""Where an RL update pushes: the advantages of a run's saved rollouts, by source, turn and action.

Reads the files `train.save_rollouts = true` writes (RUN/rollouts/iter-NNNNNN.jsonl, one episode a
line, each turn with the advantage it was trained with) and prints, per iteration and source, a
markdown table of the groups whose episodes disagree (the only ones with a non-zero episode
advantage), the training success, and for each (turn, action tag) the number of turns and the sum
of advantage x response tokens: what the token-mean PPO loss pushes up (+) or down (-).

    python3 scripts/advantage_by_action.py RUN [--iterations 1-3]

The action tag is the first `<tag>` of the action sent to the environment (Search QA: search or
answer; the tag itself for the others); a turn without one counts as `none`. Standard library only.
"""

import argparse
import collections
import glob
import json
import os
import re
import sys


def tag(action):
    m = re.match(r"\s*<([A-Za-z_]+)>", action)
    if m:
        return m.group(1)
    word = action.strip().split("[", 1)[0].split(" ", 1)[0]
    return word if word else "none"


def iteration_range(text):
    lo, _, hi = text.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", help="the run folder (holds rollouts/iter-*.jsonl)")
    ap.add_argument("--iterations", type=iteration_range, help="e.g. 1-3 (default: all)")
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.run, "rollouts", "iter-*.jsonl")))
    if not files:
        sys.exit(f"{args.run}: no rollouts/iter-*.jsonl (train with train.save_rollouts = true)")
    print("| iteration | source | mixed groups / groups | success | turn | action | turns | Σ adv × tokens |")
    print("|---|---|---|---|---|---|---|---|")
    total = collections.defaultdict(float)
    for path in files:
        with open(path, encoding="utf-8") as f:
            episodes = [json.loads(line) for line in f if line.strip()]
        if not episodes:
            continue
        it = episodes[0]["iteration"]
        if args.iterations and it not in args.iterations:
            continue
        for source in sorted({e.get("source", "") for e in episodes}):
            mine = [e for e in episodes if e.get("source", "") == source]
            groups = collections.defaultdict(set)
            for e in mine:
                groups[e["group"]].add(e["success"])
            mixed = sum(1 for g in groups.values() if len(g) > 1)
            success = sum(e["success"] for e in mine) / len(mine)
            cells = collections.defaultdict(lambda: [0, 0.0])
            for e in mine:
                for t in e["turns"]:
                    if t.get("advantage") is None:
                        continue
                    cell = cells[(t["turn"], tag(t["action"]))]
                    cell[0] += 1
                    cell[1] += t["advantage"]["advantage"] * t["response_tokens"]
            for (turn, action), (n, push) in sorted(cells.items()):
                total[(source or "-", turn, action)] += push
                print(
                    f"| {it} | {source or '-'} | {mixed} / {len(groups)} | {success:.2f} "
                    f"| {turn + 1} | {action} | {n} | {push:+.0f} |"
                )
    print()
    print("| source | turn | action | Σ adv × tokens over the iterations |")
    print("|---|---|---|---|")
    for (source, turn, action), push in sorted(total.items()):
        print(f"| {source} | {turn + 1} | {action} | {push:+.0f} |")


if __name__ == "__main__":
    main()
