"""Operations: alerts, rollback, metric sinks and the run report (the go-live check: rlvr.cli.golive)."""
