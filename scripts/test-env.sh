#!/usr/bin/env bash
# Installs the system components the test suite needs (PostgreSQL server, Slurm + munge,
# slurmrestd, openssh-server, iproute2, prometheus, chromium, podman + runc + busybox-static +
# python3 + procps, what the test container images are made from) on a Debian machine;
# `make test` (and so .ci/run) runs it before pytest. As root: apt-get installs
# what is missing. As another user: one line per component it cannot get (those tests skip).
# Everything there: nothing printed, well under a second. Under CI=true a component it cannot get
# is an error (exit 1).
# The table of components lives in tests/components.py (the tests' `require` uses it too).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" -m tests.components install
