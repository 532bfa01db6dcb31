"""The Ray deployment: each module an actor pool in its own placement group.

    driver.run(cfg)        places the pools, starts the actors, runs the trainer actor, restarts it
    pools.Placement        deploy.pools -> placement groups and actor options
    actors                 RolloutWorker, RewardWorker, InferenceWorker, TrainerActor
    sync                   weight publication with a version number (object store; NCCL later)
    source.RayBatchSource  the trainer's batch collector: shards, re-issues, staleness, async prefetch
"""
