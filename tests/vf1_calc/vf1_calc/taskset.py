import random
import re

import verifiers.v1 as vf

from vf1_calc.servers.tool import Vf1CalcToolset


class Vf1CalcData(vf.TaskData):
    answer: int


class Vf1CalcTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class Vf1CalcTask(vf.Task[Vf1CalcData, vf.State, Vf1CalcTaskConfig]):
    """Add two numbers with the toolset's `add`, then say the sum."""

    @classmethod
    def toolsets(cls, config: Vf1CalcTaskConfig) -> list[vf.Toolset]:
        return [Vf1CalcToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        numbers = re.findall(r"-?\d+", trace.last_reply or "")
        return float(bool(numbers) and int(numbers[-1]) == self.data.answer)

    @vf.metric
    async def calls(self, trace: vf.Trace) -> float:
        return float(len(trace.calls))


class Vf1CalcConfig(vf.TasksetConfig):
    num_tasks: int = 64
    task: Vf1CalcTaskConfig = Vf1CalcTaskConfig()


class Vf1CalcTaskset(vf.Taskset[Vf1CalcTask, Vf1CalcConfig]):
    def load(self) -> list[Vf1CalcTask]:
        rng = random.Random(0)
        tasks = []
        for i in range(self.config.num_tasks):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            data = Vf1CalcData(id=f"add-{i}", prompt=f"{a}+{b}=?", answer=a + b)
            tasks.append(Vf1CalcTask(data, self.config.task))
        return tasks
