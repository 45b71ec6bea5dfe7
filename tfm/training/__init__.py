"""Training: the loop (loop), its objective, learning-rate schedules, run state and resume
(state), validation, progress reporting, DistributedDataParallel (distributed) and checkpoint
averaging (average)."""
