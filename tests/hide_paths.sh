#!/bin/sh
# Runs a Ray worker where the driver's files are not: each directory in $RLVR_HIDDEN (colon-separated)
# is covered by an empty tmpfs in the worker's own mount namespace (started under `unshare --mount`).
# tests/test_ray.py::test_the_worker_pools_need_no_shared_filesystem
IFS=:
for dir in $RLVR_HIDDEN; do
    mount -t tmpfs tmpfs "$dir" || exit 1
done
unset IFS
exec "$@"
