"""The built-in tool world (the embedded default): three small executable domains — shop, calendar,
bank — with verifiable end states, CM2-style checklists, seeded task generation and held-out splits.

Public API:
    generate_tasks(n, split, seed, domains=None) -> list[Task]
    held_out_pairs(domains=None) -> {domain: {(shape, entity)}}
    WorldEnvironment — reset(task) / execute(call) -> Observation / final_reward(traj)
    replay_gold(task) -> WorldDB
    get_domain(name), domain_names()
"""

from envace.worlds.environment import FinalCheck, WorldEnvironment, replay_gold
from envace.worlds.generator import SPLITS, generate_task, generate_tasks, held_out_pairs, task_pairs
from envace.worlds.registry import domain_names, get_domain, register_domain

__all__ = [
    "FinalCheck", "WorldEnvironment", "replay_gold", "SPLITS", "generate_task", "generate_tasks",
    "held_out_pairs", "task_pairs", "domain_names", "get_domain", "register_domain",
]
