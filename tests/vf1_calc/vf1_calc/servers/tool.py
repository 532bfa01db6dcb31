import verifiers.v1 as vf


class Vf1CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, terms: str) -> int:
        """The sum of the integers in `terms`, written like 12+34."""
        return sum(int(t) for t in terms.split("+"))


if __name__ == "__main__":
    Vf1CalcToolset.run()
