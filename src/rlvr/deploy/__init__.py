"""Deployments of the same modules: `embedded` (rlvr.assembly.train, one process) and `ray` (rlvr.deploy.ray).

Ray is an optional extra (`pip install 'rlvr[ray]'`); nothing here imports it until a Ray run starts.
"""
