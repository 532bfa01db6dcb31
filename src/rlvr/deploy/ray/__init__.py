"""The Ray deployment: each module an actor pool in its own placement group.

driver                 the pools placed, the trainer pool run and restarted (rlvr.assembly.on_ray drives it)
parts.ActorParts       what the actors build, asked of the assembly (never the config itself)
pools.Placement        deploy.pools -> placement groups and actor options
actors                 RolloutWorker, RewardWorker, InferenceWorker, TrainerActor
sync                   weight publication with a version number (object store; NCCL later)
source.RayBatchSource  the trainer's batch collector: shards, re-issues, staleness, async prefetch
remote                 the pools as collect_batch's engine, scorer, reference, teacher, learned components
"""
