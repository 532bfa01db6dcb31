"""Scaffolded with verifiers 0.4's `vf-init vf1-calc --add-tool`, then filled in."""

from vf1_calc.taskset import Vf1CalcTaskset

__all__ = ["Vf1CalcTaskset"]
