"""A v1 environment of two agents (a solver and a judge) over vf1_calc's tasks: rlvr refuses it."""

import verifiers.v1 as vf

from vf1_calc.taskset import Vf1CalcTaskset


class DuelConfig(vf.EnvConfig):
    solver: vf.AgentConfig = vf.AgentConfig()
    judge: vf.AgentConfig = vf.AgentConfig()


class DuelEnv(vf.Env[DuelConfig]):
    async def run(self, task, agents):
        await agents.solver.run(task)
        await agents.judge.run(task)


class DuelTaskset(Vf1CalcTaskset):
    pass


__all__ = ["DuelEnv", "DuelTaskset"]
