"""``gpulease bench``: measure a node against what was sold — GPUs present, matmul throughput per
dtype, memory and host↔device bandwidth, all-reduce within and across nodes, disk, checkpoint
store reads and two small training steps — each check with its figure, its reference, the ratio
and a verdict (:mod:`.report`, the contract every other part reads). Importing this package
loads neither numpy nor torch; the checks import what they need when they run.
"""
