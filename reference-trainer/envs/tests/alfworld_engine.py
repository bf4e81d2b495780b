#!/usr/bin/env python3
"""Replays trajectories in the real ALFWorld engine (alfworld 0.4.2, textworld 1.7.0) for the
differential test in tests/alfworld_engine.rs.

Usage: alfworld_engine.py CASES.json OUT.json

CASES.json: {"data_path": DIR, "max_steps": 50,
             "games": [{"gamefile": ".../game.tw-pddl", "actions": ["go to ...", ...]}, ...]}

The games are found the way verl-agent's AlfredTWEnv finds them (AlfredTWEnv.collect_game_files
over DIR: traj_data.json, task type, game.tw-pddl, solvable), and each one is played through the
environment AlfredTWEnv.init_env builds: textworld.gym.register_games with admissible commands,
won and the gamefile extra, the AlfredDemangler and AlfredInfos wrappers, 50 steps per episode.
Every game is registered alone (batch of one, synchronous), so a game that fails to load is
reported for that game instead of ending the run.

OUT.json: {"collected": [gamefile, ...],
           "formats": {gamefile: {"json_dump_equal": bool, "keys": [...], "domain_equal": bool,
                                  "grammar_is_template": bool}},
           "games": [{"gamefile": ..., "error": null | "message",
                      "reset": {"obs": ..., "admissible": [...], "won": bool},
                      "steps": [{"action": ..., "obs": ..., "admissible": [...],
                                 "won": bool, "done": bool}, ...]}, ...]}
"""

import json
import os
import sys
import traceback


def main():
    cases_path, out_path = sys.argv[1], sys.argv[2]
    with open(cases_path) as f:
        cases = json.load(f)

    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import (
        AlfredDemangler,
        AlfredInfos,
        AlfredTWEnv,
    )

    max_steps = cases.get("max_steps", 50)
    config = {
        "env": {
            "goal_desc_human_anns_prob": 0,
            "task_types": [1, 2, 3, 4, 5, 6],
            "domain_randomization": False,
            "expert_type": "handcoded",
        },
        "dataset": {
            "data_path": cases["data_path"],
            "eval_id_data_path": cases["data_path"],
            "eval_ood_data_path": cases["data_path"],
            "num_train_games": -1,
            "num_eval_games": -1,
        },
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": max_steps}},
    }
    # The evaluation split: no expert wrapper, no domain randomization (verl-agent's eval).
    collector = AlfredTWEnv(config, train_eval="eval_out_of_distribution")
    collected = sorted(os.path.abspath(p) for p in collector.game_files)

    # The file format, against what alfworld-generate writes: json.dump of the game data, the
    # wheel's alfred.pddl verbatim, and alfred.twl2 with UNKNOWN GOAL replaced by one of the
    # goal library's templates filled from traj_data's pddl_params (get_templated_task_desc).
    import alfworld
    import alfworld.gen.goal_library as glib

    data_dir = os.path.join(os.path.dirname(alfworld.__file__), "data")
    domain = open(os.path.join(data_dir, "alfred.pddl")).read()
    twl2 = open(os.path.join(data_dir, "alfred.twl2")).read()
    formats = {}
    for gamefile in collected:
        text = open(gamefile).read()
        data = json.loads(text)
        traj = json.load(open(os.path.join(os.path.dirname(gamefile), "traj_data.json")))
        params = traj["pddl_params"]
        goals = [
            t.format(
                obj=params["object_target"].lower(),
                recep=params["parent_target"].lower(),
                toggle=params["toggle_target"].lower(),
                mrecep=params["mrecep_target"].lower(),
            )
            for t in glib.gdict[traj["task_type"]]["templates"]
        ]
        formats[gamefile] = {
            "json_dump_equal": json.dumps(data) == text,
            "keys": list(data.keys()),
            "domain_equal": data["pddl_domain"] == domain,
            "grammar_is_template": any(data["grammar"] == twl2.replace("UNKNOWN GOAL", g) for g in goals),
        }

    results = []
    for case in cases["games"]:
        gamefile = os.path.abspath(case["gamefile"])
        result = {"gamefile": gamefile, "error": None, "reset": None, "steps": []}
        results.append(result)
        try:
            request_infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
            env_id = textworld.gym.register_games(
                [gamefile],
                request_infos,
                batch_size=1,
                asynchronous=False,
                max_episode_steps=max_steps,
                wrappers=[AlfredDemangler(shuffle=False), AlfredInfos],
            )
            env = textworld.gym.make(env_id)
            obs, infos = env.reset()
            result["reset"] = {
                "obs": obs[0],
                "admissible": list(infos["admissible_commands"][0]),
                "won": bool(infos["won"][0]),
            }
            for action in case["actions"]:
                obs, _, dones, infos = env.step([action])
                result["steps"].append(
                    {
                        "action": action,
                        "obs": obs[0],
                        "admissible": list(infos["admissible_commands"][0]),
                        "won": bool(infos["won"][0]),
                        "done": bool(dones[0]),
                    }
                )
                if dones[0]:
                    break
            env.close()
        except Exception:  # one broken game must not hide the others
            result["error"] = traceback.format_exc(limit=3)

    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"collected": collected, "formats": formats, "games": results}, f)
    os.replace(tmp, out_path)


if __name__ == "__main__":
    main()
