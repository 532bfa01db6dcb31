"""Operations: alerts, rollback, metric sinks, the run report and the go-live check."""
